package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/allox-os/allox/deploy/kata"
)

// checkAnnotations refuses, element by element, a kata.enable_annotations entry Kata's runtimes
// must never take from a pod (kernel command line, boot assets, host paths, ...), a pattern, a name
// of another annotation family and an unknown name; kata.CheckAnnotation says why.
func (d *decoder) checkAnnotations(key string, names []string) {
	for i, n := range names {
		k := fmt.Sprintf("%s.%d", key, i)
		if err := kata.CheckAnnotation(n); err != nil {
			msg := strings.TrimPrefix(err.Error(), kata.ErrAnnotation.Error()+": ")
			suggest := ""
			if !kata.KnownHypervisorAnnotation(n) {
				suggest = didYouMean(n, kata.HypervisorAnnotations())
			}
			d.errorf(k, "Annotation not allowed", "%s. Remove it from enable_annotations.%s", upperFirst(msg), suggest)
			continue
		}
		if slices.Index(names, n) < i {
			d.errorf(k, "Annotation listed twice", "%q is already element %d; remove this one.", n, slices.Index(names, n))
		}
	}
}

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
