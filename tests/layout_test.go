package tests

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// allowedImports is STYLE.md's dependency direction: for each kvd package,
// the kvd packages and third-party module prefixes it may import. The
// standard library is always allowed. Packages not listed (tests) are free.
var allowedImports = map[string][]string{
	"kvd/protocol/binary":        {},
	"kvd/protocol/text":          {},
	"kvd/protocol/text/texttest": {},
	"kvd/protocol/translate":     {"kvd/protocol/text", "kvd/protocol/binary"},
	"kvd/gauge":                  {},
	"kvd/probe":                  {},
	"kvd/config":                 {"kvd/tenant", "kvd/ingress", "kvd/probe"},
	"kvd/engine":                 {"github.com/cockroachdb/pebble/v2"},
	"kvd/tenant":                 {"kvd/gauge", "golang.org/x/crypto", "github.com/tidwall/gjson"},
	"kvd/ingress":                {"kvd/probe", "kvd/gauge"},
	// netmem is about gnet's connections: it pauses reading through gnet's poller.
	"kvd/netmem": {"github.com/panjf2000/gnet/v2"},
	"kvd/command": {"kvd/catalog", "kvd/engine", "kvd/ingress", "kvd/latency", "kvd/observe", "kvd/tenant",
		"kvd/protocol/binary", "kvd/protocol/translate"},
	"kvd/work": {"kvd/catalog", "kvd/command", "kvd/engine", "kvd/ingress", "kvd/protocol/binary"},
	"kvd/server": {"kvd/work", "kvd/command", "kvd/catalog", "kvd/protocol/binary", "kvd/protocol/text",
		"kvd/protocol/translate", "kvd/ingress", "kvd/tenant", "kvd/engine", "kvd/probe", "kvd/gauge", "kvd/netmem",
		"kvd/observe", "kvd/latency", "kvd/internal/clock", "kvd/internal/fdlimit", "kvd/internal/gnetlog", "kvd/internal/lograte", "kvd/internal/version", "kvd/server/options", "kvd/slots", "github.com/panjf2000/gnet/v2"},
	"kvd/slots":          {"kvd/internal/lograte"},
	"kvd/server/options": {"kvd/catalog", "kvd/engine", "kvd/ingress", "kvd/internal/clock", "kvd/internal/fdlimit", "kvd/netmem", "kvd/tenant"},
	"kvd/observe": {"kvd/catalog", "kvd/ingress", "kvd/tenant", "kvd/engine", "kvd/gauge", "kvd/latency",
		"github.com/prometheus/client_golang", "github.com/prometheus/client_model"},
	"kvd/latency": {},
	"kvd/catalog": {"kvd/engine", "kvd/tenant", "go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/api/v3",
		"go.uber.org/zap", "google.golang.org/grpc"},
	"kvd/catalog/etcdtest":  {"kvd/internal/loopback"},
	"kvd/internal/loopback": {},
	"kvd/internal/clock":    {},
	"kvd/internal/fdlimit":  {},
	"kvd/internal/gnetlog":  {},
	"kvd/internal/lograte":  {},
	"kvd/internal/version":  {},
	"kvd/cmd/kvd":           {"kvd/config", "kvd/server", "kvd/server/options", "github.com/prometheus/client_golang", "golang.org/x/net/netutil"},
	"kvd/cmd/kvctl":         {"kvd/client", "kvd/protocol/binary", "kvd/tenant"},
	"kvd/cmd/kvbench":       {"kvd/bench"},
	"kvd/bench":             {"kvd/protocol/binary", "gonum.org/v1/plot"},
	"kvd/bench/ceiling":     {"github.com/panjf2000/gnet/v2"},
	"kvd/client":            {"kvd/protocol/binary"},
	"kvd/client/clienttest": {"kvd/client", "kvd/protocol/binary"},
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

// TestImportDirection fails when a package imports against the house
// dependency direction, or when a new package appears without a rule.
func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "kvd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.ImportPath == "kvd/tests" {
			continue
		}
		allowed, ok := allowedImports[p.ImportPath]
		if !ok {
			t.Errorf("package %s has no import rule in allowedImports: add one that follows STYLE.md", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !importAllowed(imp, allowed) {
				t.Errorf("%s imports %s: not allowed by STYLE.md's dependency direction", p.ImportPath, imp)
			}
		}
	}
}

func importAllowed(imp string, allowed []string) bool {
	first, _, _ := strings.Cut(imp, "/")
	if !strings.Contains(first, ".") && first != "kvd" {
		return true // standard library
	}
	for _, a := range allowed {
		if imp == a || strings.HasPrefix(imp, a+"/") {
			return true
		}
	}
	return false
}

// connFiles are the files of package server that may define *conn methods:
// the loop's, admission's, replies' and control's.
var connFiles = map[string]bool{"conn.go": true, "conn_text.go": true, "admit.go": true, "reply.go": true, "control.go": true}

// serverMaxLines is the size package server stays under (non-test lines):
// what is not the loop, admission, replies or control lives in a package
// of its own.
const serverMaxLines = 2300

// TestServerShape: *conn methods are defined only in the loop's,
// admission's, replies' and control's files, and package server stays
// under serverMaxLines.
func TestServerShape(t *testing.T) {
	files, err := filepath.Glob("../server/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || connFiles[filepath.Base(path)] {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "conn" {
					t.Errorf("%s defines (*conn).%s: *conn methods belong in %v", filepath.Base(path), fn.Name.Name, keys(connFiles))
				}
			}
		}
	}
	if lines >= serverMaxLines {
		t.Errorf("package server has %d lines, want under %d: move what is not the loop, admission, replies or control into a package of its own", lines, serverMaxLines)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
