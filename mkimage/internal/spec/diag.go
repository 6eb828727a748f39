package spec

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// FormatDiagnostics writes diags as text, one after another, compiler style:
//
//	images/allox.hcl:15:3: error: Unsupported argument
//	   15 |   fragmnts = ["../kernel/fragments/*.conf"]
//	      |   ^^^^^^^^
//	  An argument named "fragmnts" is not expected here. Did you mean "fragments"?
//
// src is the spec the diagnostics are about, named filename; when src is nil (diagnostics from
// Load) the file is read from filename, and snippets are left out if it cannot be.
func FormatDiagnostics(w io.Writer, filename string, src []byte, diags hcl.Diagnostics) error {
	if src == nil {
		src, _ = os.ReadFile(filename)
	}
	lines := strings.Split(string(src), "\n")
	var b strings.Builder
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		if d.Subject == nil {
			fmt.Fprintf(&b, "%s: %s: %s\n", filename, sev, d.Summary)
		} else {
			r := d.Subject
			fmt.Fprintf(&b, "%s:%d:%d: %s: %s\n", r.Filename, r.Start.Line, r.Start.Column, sev, d.Summary)
			if r.Start.Line >= 1 && r.Start.Line <= len(lines) {
				writeSnippet(&b, lines[r.Start.Line-1], *r)
			}
		}
		if d.Detail != "" {
			fmt.Fprintf(&b, "  %s\n", d.Detail)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSnippet prints the source line and underlines the range (to the end of the line when the
// range spans several lines).
func writeSnippet(b *strings.Builder, line string, r hcl.Range) {
	line = strings.TrimRight(line, "\r")
	num := strconv.Itoa(r.Start.Line)
	pad := strings.Repeat(" ", len(num))
	fmt.Fprintf(b, " %s | %s\n", num, line)
	start := min(max(r.Start.Column-1, 0), len(line))
	end := len(line)
	if r.End.Line == r.Start.Line {
		end = min(max(r.End.Column-1, start+1), len(line))
	}
	under := strings.Repeat("^", max(end-start, 1))
	lead := []rune(line[:start])
	for i, c := range lead {
		if c != '\t' {
			lead[i] = ' '
		}
	}
	fmt.Fprintf(b, " %s | %s%s\n", pad, string(lead), under)
}

// sortDiagnostics orders diags by position so output does not depend on map order; diagnostics
// without a position come last, in the order they were made.
func sortDiagnostics(diags hcl.Diagnostics) {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		if a.Subject == nil || b.Subject == nil {
			return cmpBool(a.Subject == nil, b.Subject == nil)
		}
		return cmp.Or(
			cmp.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte),
			cmp.Compare(a.Subject.End.Byte, b.Subject.End.Byte),
		)
	})
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
