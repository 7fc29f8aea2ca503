package coordinator

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// statusStyle is how a status is drawn: fill and border colours, and
// whether the border is dashed. The same in DOT and in Mermaid.
var statusStyle = [...]struct {
	fill, stroke string
	dashed       bool
}{
	Pending:   {"#eeeeee", "#757575", false},
	Ready:     {"#fff9c4", "#f9a825", false},
	Running:   {"#bbdefb", "#1565c0", false},
	Succeeded: {"#c8e6c9", "#2e7d32", false},
	Failed:    {"#ffcdd2", "#c62828", false},
	Cancelled: {"#ffe0b2", "#ef6c00", false},
	Skipped:   {"#f5f5f5", "#9e9e9e", true},
}

// WriteDOT writes the snapshot as a Graphviz digraph: a box per task,
// labelled with its ID and status and filled by status (pending grey,
// ready yellow, running blue, succeeded green, failed red, cancelled
// orange, skipped dashed), and an arrow from each dependency to the task
// that depends on it (an Edge naming a task not in Tasks is left out, in
// both renderers). Render it with `dot -Tsvg`. It builds the text, then
// makes one Write to w and returns its error; it does not change g, and
// may run concurrently with other readers of g.
func (g *Snapshot) WriteDOT(w io.Writer) error {
	var b strings.Builder
	b.WriteString("digraph baton {\n\trankdir=LR;\n\tnode [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n")
	g.families().walk(func(i int, depth int) {
		t := &g.Tasks[i]
		st := styleOf(t.Status)
		style := ""
		if st.dashed {
			style = `, style="rounded,filled,dashed"`
		}
		fmt.Fprintf(&b, "%s%s [label=%s, fillcolor=%q, color=%q%s];\n", tabs(depth+1),
			dotQuote(t.ID), dotQuote(t.ID+"\n"+t.Status.String()), st.fill, st.stroke, style)
	}, func(i, depth int) {
		fmt.Fprintf(&b, "%ssubgraph \"cluster_%d\" {\n%slabel=%s;\n%sstyle=dashed;\n", tabs(depth+1), i,
			tabs(depth+2), dotQuote("spawned by "+g.Tasks[i].ID), tabs(depth+2))
	}, func(_, depth int) {
		b.WriteString(tabs(depth+1) + "}\n")
	})
	ids := make(map[string]bool, len(g.Tasks))
	for _, t := range g.Tasks {
		ids[t.ID] = true
	}
	for _, e := range g.Edges {
		if ids[e.From] && ids[e.To] {
			fmt.Fprintf(&b, "\t%s -> %s;\n", dotQuote(e.From), dotQuote(e.To))
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMermaid writes the snapshot as a Mermaid flowchart, styled as
// WriteDOT's; a Markdown file shows it when it is put in a ```mermaid
// block (GitHub and GitLab render it). Tasks are named t0, t1, ... in the
// order of Tasks; labels are escaped, so any ID is safe. Like WriteDOT,
// it makes one Write to w, returns its error and does not change g.
func (g *Snapshot) WriteMermaid(w io.Writer) error {
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	index := make(map[string]int, len(g.Tasks))
	var used [Skipped + 1]bool
	var num []byte
	for i, t := range g.Tasks {
		index[t.ID] = i
	}
	g.families().walk(func(i, depth int) {
		t := &g.Tasks[i]
		num = strconv.AppendInt(num[:0], int64(i), 10)
		b.WriteString(spaces(depth + 1))
		b.WriteString("t")
		b.Write(num)
		b.WriteString(`["`)
		b.WriteString(mermaidEscape(t.ID))
		b.WriteString("<br/>")
		b.WriteString(t.Status.String())
		b.WriteString(`"]`)
		if int(t.Status) < len(statusStyle) {
			used[t.Status] = true
			b.WriteString(":::" + t.Status.String())
		}
		b.WriteByte('\n')
	}, func(i, depth int) {
		fmt.Fprintf(&b, "%ssubgraph f%d[\"spawned by %s\"]\n", spaces(depth+1), i, mermaidEscape(g.Tasks[i].ID))
	}, func(_, depth int) {
		b.WriteString(spaces(depth+1) + "end\n")
	})
	for _, e := range g.Edges {
		from, ok1 := index[e.From]
		to, ok2 := index[e.To]
		if ok1 && ok2 {
			b.WriteString("    t")
			b.Write(strconv.AppendInt(num[:0], int64(from), 10))
			b.WriteString(" --> t")
			b.Write(strconv.AppendInt(num[:0], int64(to), 10))
			b.WriteByte('\n')
		}
	}
	for st, on := range used {
		if !on {
			continue
		}
		s := statusStyle[st]
		fmt.Fprintf(&b, "    classDef %s fill:%s,stroke:%s", Status(st), s.fill, s.stroke)
		if s.dashed {
			b.WriteString(",stroke-dasharray:4 3")
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func styleOf(st Status) struct {
	fill, stroke string
	dashed       bool
} {
	if int(st) < len(statusStyle) {
		return statusStyle[st]
	}
	return statusStyle[Pending]
}

// dotQuote quotes s as a DOT string: a backslash and a double quote are
// escaped, a newline becomes \n, and a byte that is not UTF-8 or a control
// character becomes \xHH.
func dotQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case (r == utf8.RuneError && n == 1) || r < ' ' || r == 0x7f:
			// A byte that is not UTF-8, or a control character (NUL would
			// end the file for Graphviz): its hex code, so that two IDs
			// never draw as one node.
			fmt.Fprintf(&b, `\x%02X`, s[i])
		default:
			b.WriteRune(r)
		}
		i += n
	}
	b.WriteByte('"')
	return b.String()
}

// mermaidEscape makes s safe inside a quoted Mermaid label: characters
// Mermaid or HTML would read become entity codes (#quot; #lt; ...), and a
// byte that is not UTF-8 becomes the text \xHH, as in DOT, so that the
// output is UTF-8 and two IDs never draw as one label.
func mermaidEscape(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || strings.ContainsRune("\"<>&#`", r) }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02X`, s[i])
		case r == '"':
			b.WriteString("#quot;")
		case r == '<':
			b.WriteString("#lt;")
		case r == '>':
			b.WriteString("#gt;")
		case r == '&':
			b.WriteString("#amp;")
		case r == '#':
			b.WriteString("#35;")
		case r == '`': // opens a markdown string in Mermaid
			b.WriteString("#96;")
		case r == '\n':
			b.WriteString("<br/>")
		case r < ' ' || r == 0x7f:
			b.WriteString("#" + strconv.Itoa(int(r)) + ";")
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// families is how a snapshot's tasks nest: each task's children (by
// index) among the tasks of the snapshot, in its order; a task whose
// parent is not in the snapshot is drawn at the top.
type families struct {
	g    *Snapshot
	kids map[int][]int // nil: no task of the snapshot has its parent in it
}

func (g *Snapshot) families() families {
	f := families{g: g}
	var index map[string]int
	for i := range g.Tasks {
		if g.Tasks[i].Parent == "" {
			continue
		}
		if index == nil {
			index = make(map[string]int, len(g.Tasks))
			for j, t := range g.Tasks {
				index[t.ID] = j
			}
			f.kids = map[int][]int{}
		}
		if p, ok := index[g.Tasks[i].Parent]; ok {
			f.kids[p] = append(f.kids[p], i)
		}
	}
	return f
}

// walk visits the tasks, each spawner's children after it inside a
// cluster: node(i, depth) for each task, open and close around each
// cluster (i: its spawner), depth counting the clusters around. A
// snapshot without families costs one pass and no map.
func (f families) walk(node, open, close func(i, depth int)) {
	if f.kids == nil {
		for i := range f.g.Tasks {
			node(i, 0)
		}
		return
	}
	placed := make(map[int]bool, len(f.g.Tasks))
	for _, kids := range f.kids {
		for _, k := range kids {
			placed[k] = true
		}
	}
	type frame struct{ spawner, next, depth int }
	for i := range f.g.Tasks {
		if placed[i] {
			continue
		}
		node(i, 0)
		if len(f.kids[i]) == 0 {
			continue
		}
		open(i, 0)
		stack := []frame{{i, 0, 1}} // a worklist: nesting is as deep as the user spawned
		for len(stack) > 0 {
			fr := &stack[len(stack)-1]
			kids := f.kids[fr.spawner]
			if fr.next == len(kids) {
				close(fr.spawner, fr.depth-1)
				stack = stack[:len(stack)-1]
				continue
			}
			k := kids[fr.next]
			fr.next++
			node(k, fr.depth)
			if len(f.kids[k]) > 0 {
				open(k, fr.depth)
				stack = append(stack, frame{k, 0, fr.depth + 1})
			}
		}
	}
}

const indent = "\t\t\t\t\t\t\t\t"

// tabs and spaces indent a line n levels, without allocating up to 8.
func tabs(n int) string {
	if n <= len(indent) {
		return indent[:n]
	}
	return strings.Repeat("\t", n)
}

func spaces(n int) string {
	if n <= len(indent) {
		return "                                "[:4*n]
	}
	return strings.Repeat("    ", n)
}
