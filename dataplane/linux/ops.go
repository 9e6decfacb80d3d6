package linux

import "github.com/dpd-dev/dpd/dataplane/linux/nl"

// Ops counts the kernel operations of the endpoint side, so that tests
// and the restart log can show what a reconciliation cost: re-applying an
// unchanged endpoint (after a restart or a controller reconnect) must not
// load, install, attach or write anything.
type Ops struct {
	ProgramLoads  uint64 // policy programs compiled and loaded
	ProgramAdopts uint64 // pinned policy programs adopted instead (no write)
	// ProgramReloads counts programs reloaded with the direct epilogue
	// call in the background and swapped in (directreload.go); not in
	// Writes: they change no verdict and no endpoint waits for them.
	ProgramReloads uint64
	JumpWrites     uint64 // dpd_jump installs and clears
	IfStateWrites  uint64 // dpd_ifstate sets and deletes
	Attaches       uint64 // Attach calls: entry programs were missing or stale
	Detaches       uint64
	FailClosed     uint64 // interfaces made to drop until programmed
	GCRemovals     uint64 // objects garbage collection removed
	Netlink        nl.Stats
}

// Writes is the number of kernel changes of any kind (adoptions and
// netlink reads are not changes).
func (o Ops) Writes() uint64 {
	return o.ProgramLoads + o.JumpWrites + o.IfStateWrites + o.Attaches + o.Detaches +
		o.GCRemovals + o.Netlink.Writes()
}

// Sub returns o - p field by field: the operations between two snapshots.
func (o Ops) Sub(p Ops) Ops {
	return Ops{
		ProgramLoads:   o.ProgramLoads - p.ProgramLoads,
		ProgramAdopts:  o.ProgramAdopts - p.ProgramAdopts,
		ProgramReloads: o.ProgramReloads - p.ProgramReloads,
		JumpWrites:     o.JumpWrites - p.JumpWrites,
		IfStateWrites:  o.IfStateWrites - p.IfStateWrites,
		Attaches:       o.Attaches - p.Attaches,
		Detaches:       o.Detaches - p.Detaches,
		FailClosed:     o.FailClosed - p.FailClosed,
		GCRemovals:     o.GCRemovals - p.GCRemovals,
		Netlink:        o.Netlink.Sub(p.Netlink),
	}
}

// Ops returns the operations made so far.
func (k *Kernel) Ops() Ops {
	k.mu.Lock()
	o := k.ops
	k.mu.Unlock()
	o.Netlink = k.netStats()
	return o
}
