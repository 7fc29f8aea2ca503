package pgstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// dbText is s as a text or JSON column holds it: PostgreSQL's text and
// jsonb take UTF-8 without NUL, and a commit carrying anything else would
// fail (and stop the scheduler). A task's error, log line or ID may hold
// any bytes: the columns, a view for people, show each run of bytes that
// is not UTF-8, and each NUL, as U+FFFD; baton.records keeps the bytes as
// they are.
func dbText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// isDBText reports whether s is text the database keeps as it is
// (dbText(s) == s): what a task submitted through the database may name.
func isDBText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// maxErrText bounds an error's text in baton.tasks (the error column and
// the attempts' JSON): an error of any size would otherwise go whole into
// every history record of its task, and a row's jsonb is bounded (256 MB),
// past which the commit fails. baton.records keeps the whole text.
const maxErrText = 64 << 10

// errText is an error's text as baton.tasks keeps it: dbText, cut to
// maxErrText bytes (on a character's boundary) with how long it was.
func errText(s string) string {
	return cutText(s, maxErrText, maxErrText, "… (cut: %d bytes in all)")
}

// maxIDText bounds an ID in baton.tasks' indexed columns (id, parent) and
// in baton.pending's key: a B-tree entry holds at most about 2.7 KB, past
// which the commit fails. Client refuses longer IDs; an ID longer than
// this submitted on the leader's scheduler shows cut, with its length.
const maxIDText = 1 << 10

// idText is an ID as the indexed columns keep it: dbText, cut to
// maxIDText bytes (on a character's boundary) with how long it was.
func idText(s string) string { return cutText(s, maxIDText, maxIDText-32, "… (%d bytes)") }

// cutText is dbText(s), or, past limit bytes, its first keep bytes (back
// to a character's boundary) and note, a format given the whole length.
func cutText(s string, limit, keep int, note string) string {
	s = dbText(s)
	if len(s) <= limit {
		return s
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(note, len(s))
}
