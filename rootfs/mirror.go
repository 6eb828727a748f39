package rootfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// aptSource is one "deb" line or one deb822 stanza of an apt sources file.
type aptSource struct {
	types, uris, suites, components []string
}

// HostMirror returns the Debian mirror that apt on this host uses: the URI of the first enabled "deb"
// source for suite with the "main" component, reading aptDir/sources.list, then aptDir/sources.list.d/
// *.list and *.sources in name order, as apt does. When no source names suite, the first "main" source
// whose URI ends in /debian is taken (a Debian mirror serves every suite).
func HostMirror(aptDir, suite string) (string, error) {
	files := []string{filepath.Join(aptDir, "sources.list")}
	more, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*"))
	sort.Strings(more)
	for _, f := range more {
		if strings.HasSuffix(f, ".list") || strings.HasSuffix(f, ".sources") {
			files = append(files, f)
		}
	}
	var all []aptSource
	for _, name := range files {
		srcs, err := readSourcesFile(name)
		if err != nil {
			return "", err
		}
		all = append(all, srcs...)
	}
	if u := pickMirror(all, suite, true); u != "" {
		return u, nil
	}
	if u := pickMirror(all, suite, false); u != "" {
		return u, nil
	}
	return "", fmt.Errorf("no Debian mirror for %s with component main in %s/sources.list{,.d}: set the mirror explicitly: the URI apt uses for Debian, ending in /debian", suite, aptDir)
}

func pickMirror(srcs []aptSource, suite string, exactSuite bool) string {
	for _, s := range srcs {
		if !slices.Contains(s.types, "deb") || !slices.Contains(s.components, "main") {
			continue
		}
		if exactSuite && !slices.Contains(s.suites, suite) {
			continue
		}
		for _, u := range s.uris {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "file:") {
				continue
			}
			if exactSuite || strings.HasSuffix(strings.TrimSuffix(u, "/"), "/debian") {
				return u
			}
		}
	}
	return ""
}

func readSourcesFile(name string) ([]aptSource, error) {
	f, err := os.Open(name)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if strings.HasSuffix(name, ".sources") {
		return parseDeb822Sources(f)
	}
	return parseOneLineSources(f)
}

// parseOneLineSources reads the one-line format: "deb [opt=val ...] uri suite component...".
func parseOneLineSources(r io.Reader) ([]aptSource, error) {
	var out []aptSource
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], "[") {
			// Options: skip up to the field that closes the bracket.
			end := slices.IndexFunc(f[1:], func(s string) bool { return strings.HasSuffix(s, "]") })
			if end < 0 {
				continue
			}
			f = append(f[:1], f[end+2:]...)
		}
		if len(f) < 3 {
			continue
		}
		out = append(out, aptSource{types: f[:1], uris: f[1:2], suites: f[2:3], components: f[3:]})
	}
	return out, sc.Err()
}

// parseDeb822Sources reads the deb822 format: stanzas of Types/URIs/Suites/Components fields.
func parseDeb822Sources(r io.Reader) ([]aptSource, error) {
	stanzas, err := parseDeb822(r)
	if err != nil {
		return nil, err
	}
	var out []aptSource
	for _, st := range stanzas {
		if strings.EqualFold(st["enabled"], "no") {
			continue
		}
		out = append(out, aptSource{
			types:      strings.Fields(st["types"]),
			uris:       strings.Fields(st["uris"]),
			suites:     strings.Fields(st["suites"]),
			components: strings.Fields(st["components"]),
		})
	}
	return out, nil
}
