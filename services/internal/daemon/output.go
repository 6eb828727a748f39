package daemon

import (
	"encoding/base64"
	"unicode/utf8"

	"github.com/allox-os/allox/internal/rpc"
)

// encodeOutput encodes a page of output read from offset up to next. In auto mode a page that
// is valid UTF-8 goes as text; one that is so but for a character cut at the page's end goes as
// text without the cut bytes (next moves back to them, so that the next page starts with the
// whole character); any other goes as base64. Nothing is ever replaced or lost.
func encodeOutput(data []byte, mode string, offset, next int64, eof bool) (string, string, int64) {
	if mode == rpc.EncodingBase64 {
		return base64.StdEncoding.EncodeToString(data), rpc.EncodingBase64, next
	}
	if utf8.Valid(data) {
		return string(data), rpc.EncodingUTF8, next
	}
	if cut := partialRune(data); cut > 0 && cut < len(data) && !eof && utf8.Valid(data[:len(data)-cut]) {
		return string(data[:len(data)-cut]), rpc.EncodingUTF8, offset + int64(len(data)-cut)
	}
	return base64.StdEncoding.EncodeToString(data), rpc.EncodingBase64, next
}

// partialRune is the length of an incomplete UTF-8 sequence at the end of b (0 if none).
func partialRune(b []byte) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}
