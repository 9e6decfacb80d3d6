package dataplane

import (
	"context"
	"errors"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Engine is the dirty-state engine. STUB: the engine author replaces the
// bodies; the exported signatures are the contract.
type Engine struct {
	opts Options
}

// New returns an engine; Run starts it.
func New(opts Options) *Engine { return &Engine{opts: opts} }

// Run processes the inbox and applies until ctx ends.
func (e *Engine) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// NewSession starts a controller session: a new mark-and-sweep epoch.
// Only one session is active; the server closes the older one first.
func (e *Engine) NewSession(peer string) Session { panic(errors.New("engine: not implemented")) }

// LinkUpdate feeds an interface change from the kernel's monitor.
func (e *Engine) LinkUpdate(u model.LinkUpdate) {}

// Status summarises the engine for Inspect.
func (e *Engine) Status() StatusInfo { return StatusInfo{} }

// Endpoints lists every workload endpoint, sorted by id.
func (e *Engine) Endpoints() []EndpointInfo { return nil }

// Endpoint finds one endpoint by "orch/workload/endpoint" or a unique
// workload id.
func (e *Engine) Endpoint(id string) (EndpointInfo, bool) { return EndpointInfo{}, false }
