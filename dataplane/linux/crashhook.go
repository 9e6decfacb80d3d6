package linux

// The crash test of a restart mid-apply sets CrashAfterAttachEnv=1 in
// dpd's environment; cmd/dpd then sets Options.AfterAttach to a hook that
// exits with CrashExitCode, so the first endpoint's interface is left
// attached but not ready, as a crash there would leave it. The kernel
// itself never reads the environment.
const (
	CrashAfterAttachEnv = "DPD_TEST_CRASH_AFTER_ATTACH"
	CrashExitCode       = 97
)
