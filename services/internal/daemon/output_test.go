package daemon

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

func TestEncodeOutput(t *testing.T) {
	for _, tt := range []struct {
		name     string
		data     string
		mode     string
		eof      bool
		wantData string
		wantEnc  string
		wantNext int64
	}{
		{"text", "héllo\n", rpc.EncodingAuto, true, "héllo\n", rpc.EncodingUTF8, 7},
		{"invalid bytes go as base64", "f\xfe\xff", rpc.EncodingAuto, true, "Zv7/", rpc.EncodingBase64, 3},
		{"a character cut at the page end waits for the next page", "ab\xc3", rpc.EncodingAuto, false, "ab", rpc.EncodingUTF8, 2},
		{"a cut character at the very end goes as base64", "ab\xc3", rpc.EncodingAuto, true, "YWLD", rpc.EncodingBase64, 3},
		{"base64 asked for", "ok", rpc.EncodingBase64, true, "b2s=", rpc.EncodingBase64, 2},
	} {
		data, enc, next := encodeOutput([]byte(tt.data), tt.mode, 0, int64(len(tt.data)), tt.eof)
		if data != tt.wantData || enc != tt.wantEnc || next != tt.wantNext {
			t.Errorf("%s: encodeOutput = %q, %s, %d; want %q, %s, %d", tt.name, data, enc, next, tt.wantData, tt.wantEnc, tt.wantNext)
		}
	}
}

// FuzzOutputRoundTrip pages through arbitrary bytes as process.output does in auto mode and
// checks that decoding the pages gives back exactly the bytes, and that every page progresses.
func FuzzOutputRoundTrip(f *testing.F) {
	for _, s := range []string{"", "plain", "f\xfe", "f\xff", "é€𝄞", "a\xc3\xa9b\xe2\x82", "\x00\x80\xbf"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, page uint8) {
		limit := int64(page%16) + 1
		var got []byte
		for off := int64(0); off < int64(len(stream)); {
			end := min(off+limit, int64(len(stream)))
			data, enc, next := encodeOutput(stream[off:end], rpc.EncodingAuto, off, end, end == int64(len(stream)))
			if next <= off {
				t.Fatalf("no progress at offset %d of %q (page %d)", off, stream, limit)
			}
			var b []byte
			switch enc {
			case rpc.EncodingUTF8:
				b = []byte(data)
			case rpc.EncodingBase64:
				var err error
				if b, err = base64.StdEncoding.DecodeString(data); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("encoding %q", enc)
			}
			if int64(len(b)) != next-off {
				t.Fatalf("page at %d decodes to %d bytes, next says %d", off, len(b), next-off)
			}
			got, off = append(got, b...), next
		}
		if !bytes.Equal(got, stream) {
			t.Fatalf("round trip: %q -> %q", stream, got)
		}
	})
}
