// Package gnetlog routes gnet's own logging to slog: gnet's chatter at
// debug level, its warnings and errors as such, tagged component=gnet.
package gnetlog

import (
	"fmt"
	"log/slog"
)

// Logger is a gnet logging.Logger writing to L.
type Logger struct{ L *slog.Logger }

func (g Logger) Debugf(f string, a ...any) { g.L.Debug(fmt.Sprintf(f, a...), "component", "gnet") }
func (g Logger) Infof(f string, a ...any)  { g.L.Debug(fmt.Sprintf(f, a...), "component", "gnet") }
func (g Logger) Warnf(f string, a ...any)  { g.L.Warn(fmt.Sprintf(f, a...), "component", "gnet") }
func (g Logger) Errorf(f string, a ...any) { g.L.Error(fmt.Sprintf(f, a...), "component", "gnet") }
func (g Logger) Fatalf(f string, a ...any) { g.L.Error(fmt.Sprintf(f, a...), "component", "gnet") }
