package server

import (
	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixwire"
	"github.com/dpd-dev/dpd/server/policysync"
)

// tapEngine also hands every message the engine accepts to the policy-sync
// processor, in the same order, and starts the processor's mark-and-sweep
// epoch with each controller session, so both see one history.
type tapEngine struct {
	Engine
	proc *policysync.Processor
}

func (t tapEngine) NewSession(peer string) engine.Session {
	s := t.Engine.NewSession(peer)
	t.proc.StartEpoch()
	return &tapSession{Session: s, proc: t.proc}
}

// tapSession is a wireMirror: policy sync serves subsets of the wire
// messages themselves.
type tapSession struct {
	engine.Session
	proc *policysync.Processor
}

// mirror hands msg to policy sync once the engine has it. Submits of one
// session are serialised by its stream, so the mirror keeps the engine's
// order.
func (s *tapSession) mirror(msg *felix.ToDataplane) { s.proc.OnUpdate(msg) }

// generation tells policy sync which generation to serve its clients in.
func (s *tapSession) generation(g felixwire.Generation) { s.proc.ControllerGeneration(g) }
