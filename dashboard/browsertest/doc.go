// Package browsertest drives Baton's dashboard in a real headless
// Chromium (chromedp), as a person uses it, and writes screenshots of
// each page. It is a module of its own so that the core module does not
// require chromedp: nothing here is for import. Its tests skip when no
// Chromium is installed (see .ci/run, which installs Debian's).
package browsertest
