// Package images embeds the default image spec, so that `mkimage build` with no argument builds it.
package images

import _ "embed"

// DefaultName is the file name of the default spec inside this directory.
const DefaultName = "allox.hcl"

// Default is the text of images/allox.hcl.
//
//go:embed allox.hcl
var Default []byte
