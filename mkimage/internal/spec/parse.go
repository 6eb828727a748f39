package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/allox-os/allox/deploy/kata"
)

var imageSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "name", Required: true},
		{Name: "version"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "kernel"},
		{Type: "init"},
		{Type: "rootfs"},
		{Type: "service", LabelNames: []string{"name"}},
		{Type: "kata"},
		{Type: "output"},
	},
}

// Load reads the spec file at path and parses it, resolving relative paths against its directory.
func Load(path string) (*Image, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read image spec",
			Detail:   fmt.Sprintf("%v. Pass the path of an existing .hcl spec.", err),
		}}
	}
	return Parse(path, src, filepath.Dir(path))
}

// Parse decodes src, named filename in diagnostics; relative paths in the spec resolve against
// baseDir. It returns every problem it finds, sorted by position. The Image is nil exactly when
// the diagnostics contain an error.
func Parse(filename string, src []byte, baseDir string) (*Image, hcl.Diagnostics) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	base, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Cannot resolve the spec directory",
			Detail:   fmt.Sprintf("%v.", err),
		})
	}
	d := newDecoder(f.Body)
	img := d.decodeImage(f.Body) // stages 1 and 2: schema, typed values
	img.File = specFile(filename, base)
	d.resolve(img, base) // stage 3: absolute paths, expanded globs
	d.validate(img)      // stage 4: semantic checks
	diags = append(diags, d.diags...)
	sortDiagnostics(diags)
	if diags.HasErrors() {
		return nil, diags
	}
	return img, diags
}

func specFile(filename, base string) string {
	if filepath.IsAbs(filename) {
		return filepath.Clean(filename)
	}
	return filepath.Join(base, filepath.Base(filename))
}

// decodeImage applies the top-level schema and decodes every block.
func (d *decoder) decodeImage(body hcl.Body) *Image {
	img := &Image{
		Rootfs: Rootfs{Suite: DefaultSuite, Filesystem: DefaultFilesystem},
		Kata: Kata{BootMode: BootImage, RootfsType: DefaultFilesystem,
			EnableAnnotations: slices.Clone(kata.DefaultEnableAnnotations), BlockDeviceDriver: kata.DefaultBlockDeviceDriver},
		Output: Output{Dir: DefaultOutputDir},
	}
	c := d.content("", body, imageSchema)
	attr(d, c, "", "name", &img.Name)
	attr(d, c, "", "version", &img.Version)
	if b := d.block(c, body, "kernel", "kernel", true); b != nil {
		d.decodeKernel(b, &img.Kernel)
	}
	if b := d.block(c, body, "init", "init", true); b != nil {
		d.decodeInit(b, &img.Init)
	}
	if b := d.block(c, body, "rootfs", "rootfs", false); b != nil {
		d.decodeRootfs(b, &img.Rootfs)
	}
	for i, b := range c.Blocks.OfType("service") {
		img.Services = append(img.Services, d.decodeService(fmt.Sprintf("service.%d", i), b))
	}
	if b := d.block(c, body, "kata", "kata", false); b != nil {
		d.decodeKata(b, &img.Kata)
	}
	if b := d.block(c, body, "output", "output", false); b != nil {
		d.decodeOutput(b, &img.Output)
	}
	return img
}
