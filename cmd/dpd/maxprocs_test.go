package main

import "testing"

func TestMaxProcsFlag(t *testing.T) {
	const cpus = 2
	checkRuntimeFlag(t, "max-procs", []runtimeFlagCase[int]{
		{name: "default: twice the CPUs", want: 2 * cpus, wantApply: true},
		{name: "flag", args: []string{"--max-procs=3"}, want: 3, wantApply: true},
		{name: "flag 0 is the default", args: []string{"--max-procs=0"}, want: 2 * cpus, wantApply: true},
		{name: "environment twin", env: map[string]string{"DPD_MAX_PROCS": "6"}, want: 6, wantApply: true},
		{name: "GOMAXPROCS stands", env: map[string]string{"GOMAXPROCS": "1"}},
		{name: "flag over GOMAXPROCS", args: []string{"--max-procs=5"}, env: map[string]string{"GOMAXPROCS": "1"}, want: 5, wantApply: true},
	}, []string{"-1", "1025", "many", ""}, func(c config, getenv func(string) string) (int, bool) {
		return procsTarget(c.MaxProcs, getenv, cpus)
	})
}

// The default follows the CPUs the runtime found, within the bound.
func TestMaxProcsDefault(t *testing.T) {
	for cpus, want := range map[int]int{0: 2, 1: 2, 8: 16, 4096: maxProcsLimit} {
		if got, ok := procsTarget(maxProcs{}, func(string) string { return "" }, cpus); got != want || !ok {
			t.Errorf("%d CPUs: %d %v, want %d", cpus, got, ok, want)
		}
	}
}
