package daemon

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name    string
		content *string // nil: no file
		mode    os.FileMode
		want    string
		wantErr string
	}{
		{name: "missing", content: nil, want: ""},
		{name: "empty", content: ptr(""), mode: 0o600, want: ""},
		{name: "blank", content: ptr(" \n"), mode: 0o600, want: ""},
		{name: "token", content: ptr("s3cret-Token_1\n"), mode: 0o600, want: "s3cret-Token_1"},
		{name: "owner read only", content: ptr("tok"), mode: 0o400, want: "tok"},
		{name: "group readable", content: ptr("tok"), mode: 0o640, wantErr: "chmod 600"},
		{name: "world readable", content: ptr("tok"), mode: 0o604, wantErr: "group or others may read it"},
		{name: "group writable", content: ptr("tok"), mode: 0o620, wantErr: "chmod 600"},
		{name: "inner space", content: ptr("two words"), mode: 0o600, wantErr: "not printable ASCII"},
		{name: "control byte", content: ptr("tok\x00en"), mode: 0o600, wantErr: "not printable ASCII"},
		{name: "too large", content: ptr(strings.Repeat("x", maxTokenBytes+1)), mode: 0o600, wantErr: "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.mode); err != nil { // not subject to the umask
					t.Fatal(err)
				}
			}
			got, err := LoadToken(path)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("LoadToken = %q, %v; want an error naming the file and containing %q", got, err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Errorf("LoadToken = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestLoadTokenDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadToken(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("LoadToken(directory) = %v, want an error", err)
	}
}

func TestBearer(t *testing.T) {
	b := newBearer("s3cret")
	for header, want := range map[string]bool{
		"":                    false,
		"s3cret":              false,
		"Bearer":              false,
		"Bearer ":             false,
		"Bearer s3cre":        false,
		"Bearer s3cret2":      false,
		"Basic s3cret":        false,
		"Bearer  s3cret":      false,
		"Bearer s3cret":       true,
		"bearer s3cret":       true,
		"BEARER s3cret":       true,
		"Bearer s3cret extra": false,
	} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/rpc", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		if got := b.allows(r); got != want {
			t.Errorf("allows(Authorization: %q) = %v, want %v", header, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
