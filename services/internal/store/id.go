package store

import "fmt"

// MaxIDLen is the longest accepted agent, session or checkpoint id.
const MaxIDLen = 64

// validID reports why id is not of the form [a-z0-9][a-z0-9._-]{0,63}, or "" if it is.
// The alphabet has no '/', NUL or upper case; the first character excludes a leading dot, so
// "." and ".." and the store's own ".rollback-*" names can never be ids.
func validID(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case len(id) > MaxIDLen:
		return fmt.Sprintf("is %d bytes long, must be at most %d", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		lowerOrDigit := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if i == 0 && !lowerOrDigit {
			return fmt.Sprintf("must start with a lower-case letter or digit, not %q", c)
		}
		if !lowerOrDigit && c != '.' && c != '_' && c != '-' {
			return fmt.Sprintf("has %q at byte %d; use only a-z, 0-9, '.', '_' and '-'", c, i)
		}
	}
	return ""
}

// checkID returns an *Error naming field when id is invalid.
func checkID(op, field, id string) error {
	why := validID(id)
	if why == "" {
		return nil
	}
	return &Error{Op: op, Field: field, ID: id, Err: ErrInvalidID,
		Hint: field + " " + why + " (pattern [a-z0-9][a-z0-9._-]{0,63}, e.g. \"session-1\")"}
}
