package channels

import (
	"strings"
	"unicode/utf8"
)

// Cut returns s cut to at most n bytes on a rune boundary: a provider's
// message as an Error.Detail holds it. A cut that would end inside a rune
// ends before it; invalid UTF-8 at the end is dropped as well.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// ReplaceNumber returns s with every occurrence of num that stands alone
// replaced by repl: an occurrence directly preceded or followed by an ASCII
// digit is part of a longer number (an error code such as "#1300", a
// timestamp) and is kept, so hiding a short recipient never corrupts the
// rest of a provider's error text. num is matched byte for byte; an empty
// num returns s unchanged.
func ReplaceNumber(s, num, repl string) string {
	return replaceStandalone(s, num, repl, false, func(s string, i, j int) bool {
		return (i > 0 && isDigit(s[i-1])) || (j < len(s) && isDigit(s[j]))
	})
}

// ReplaceAddress returns s with every occurrence of the e-mail address addr
// that stands alone replaced by repl, ignoring ASCII case (domains are
// case-insensitive and providers may echo an address in another case). An
// occurrence inside a longer address ("xada@example.com",
// "ada@example.com.au") is kept; a sentence's full stop after the address
// does not make it longer. An empty addr returns s unchanged.
func ReplaceAddress(s, addr, repl string) string {
	return replaceStandalone(s, addr, repl, true, func(s string, i, j int) bool {
		if i > 0 && (isAddrByte(s[i-1]) || s[i-1] == '.') {
			return true
		}
		if j < len(s) && isAddrByte(s[j]) {
			return true
		}
		// "a@b.co" inside "a@b.com.au" or "a@b.co.uk": a dot followed by
		// more address.
		return j+1 < len(s) && (s[j] == '.' || s[j] == '-') && isAddrByte(s[j+1])
	})
}

// replaceStandalone replaces the occurrences s[i:j] of old for which
// inside(s, i, j) is false. With fold, matching ignores ASCII case.
func replaceStandalone(s, old, repl string, fold bool, inside func(s string, i, j int) bool) string {
	if old == "" {
		return s
	}
	hay, needle := s, old
	if fold {
		hay, needle = asciiLower(s), asciiLower(old)
	}
	var b strings.Builder
	last := 0
	for from := 0; from <= len(s)-len(old); {
		k := strings.Index(hay[from:], needle)
		if k < 0 {
			break
		}
		i, j := from+k, from+k+len(old)
		if inside(s, i, j) {
			from = i + 1
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString(repl)
		last, from = j, j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isAddrByte reports whether c can sit inside an e-mail address next to
// another part of it (the dot is handled by the caller).
func isAddrByte(c byte) bool {
	return isDigit(c) || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') ||
		strings.IndexByte("_%+-@", c) >= 0
}

// asciiLower maps A-Z to a-z and keeps every other byte, so offsets in the
// result are offsets in s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
