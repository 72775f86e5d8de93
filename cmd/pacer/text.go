package main

import (
	"strconv"
	"strings"
	"unicode"
)

// quoteText returns s for a terminal: as it is when every rune is
// printable (spaces included), else Go-quoted ("a\nb", "\x1b[31m") so
// that a tenant's campaign name or pacing key cannot move the cursor,
// change colours or forge lines of the operator's output.
func quoteText(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
