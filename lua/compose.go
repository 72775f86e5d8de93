package lua

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// files holds the scripts and the fragments they include.
//
//go:embed *.lua
var files embed.FS

// includeMarker starts a line that compose replaces with a fragment: the
// line "-- @include refill" becomes the text of refill.lua.
const includeMarker = "-- @include "

// compose returns the script in file with each line "-- @include name"
// replaced by the fragment name.lua, itself composed. Redis Lua has no
// require, so a block that several scripts need lives once, in a fragment.
// compose panics on a missing fragment or an include cycle: the scripts are
// fixed at build time, so the package's tests find either at once.
func compose(file string) string {
	return splice(files, file, nil)
}

// splice composes file from fsys; outer holds the files that include it.
func splice(fsys fs.FS, file string, outer []string) string {
	chain := append(slices.Clip(outer), file)
	if slices.Contains(outer, file) {
		panic(fmt.Sprintf("lua: %s includes itself (%s)", file, strings.Join(chain, " -> ")))
	}
	src, err := fs.ReadFile(fsys, file)
	if err != nil {
		panic("lua: " + err.Error())
	}
	var b strings.Builder
	for line := range strings.SplitAfterSeq(string(src), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), includeMarker)
		if !ok {
			b.WriteString(line)
			continue
		}
		b.WriteString(splice(fsys, name+".lua", chain))
	}
	return b.String()
}
