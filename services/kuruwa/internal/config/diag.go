package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Load reads and decodes the file at path; an empty path is the configuration with only the
// host definition.
func Load(path string, vars Vars, diagOut io.Writer) (*Config, error) {
	if path == "" {
		return &Config{Definitions: map[string]Definition{HostDefinition: hostDefinition()}, Tenants: map[string]Tenant{}}, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, diags := Parse(src, filepath.Base(path), vars)
	if len(diags) > 0 {
		Format(diagOut, src, diags)
	}
	if diags.HasErrors() {
		return nil, fmt.Errorf("config %s: %d error(s), see above", path, len(diags.Errs()))
	}
	return cfg, nil
}

// Format prints diagnostics as mkimage prints the image spec's: "file:line:col: error: summary",
// the source line with the range underlined, then the detail.
func Format(w io.Writer, src []byte, diags hcl.Diagnostics) {
	lines := strings.Split(string(src), "\n")
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		if r := d.Subject; r != nil {
			fmt.Fprintf(w, "%s:%d:%d: %s: %s\n", r.Filename, r.Start.Line, r.Start.Column, sev, d.Summary)
			if r.Start.Line >= 1 && r.Start.Line <= len(lines) {
				line := strings.TrimRight(lines[r.Start.Line-1], "\r")
				start := min(max(r.Start.Column-1, 0), len(line))
				end := len(line)
				if r.End.Line == r.Start.Line {
					end = min(max(r.End.Column-1, start+1), len(line))
				}
				fmt.Fprintf(w, " %d | %s\n %s | %s%s\n", r.Start.Line, line, strings.Repeat(" ", len(fmt.Sprint(r.Start.Line))),
					strings.Repeat(" ", start), strings.Repeat("^", max(end-start, 1)))
			}
		} else {
			fmt.Fprintf(w, "%s: %s\n", sev, d.Summary)
		}
		if d.Detail != "" {
			fmt.Fprintf(w, "  %s\n", d.Detail)
		}
	}
}
