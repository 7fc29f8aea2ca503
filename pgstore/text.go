package pgstore

import (
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
