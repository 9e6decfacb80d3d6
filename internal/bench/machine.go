package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes where the figures were measured.
type Machine struct {
	CPU      string // lscpu's model name
	CPUInfo  string // /proc/cpuinfo's, when it says more than lscpu
	Cores    int
	Kernel   string
	Go       string // the driver's Go version
	MemTotal uint64 // bytes
}

func describeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if out, err := exec.Command("lscpu").Output(); err == nil {
		m.CPU = field(out, "Model name")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUInfo = field(b, "model name")
	}
	if m.CPU == "" {
		m.CPU, m.CPUInfo = m.CPUInfo, ""
	}
	if m.CPUInfo == m.CPU {
		m.CPUInfo = ""
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		kb, _ := strconv.ParseUint(strings.TrimSuffix(field(b, "MemTotal"), " kB"), 10, 64)
		m.MemTotal = kb << 10
	}
	return m
}

// field is the value of the first "key: value" line of text.
func field(text []byte, key string) string {
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cpuText is the CPU model and core count.
func (m Machine) cpuText() string {
	cpu := m.CPU
	if m.CPUInfo != "" {
		cpu += " (/proc/cpuinfo: " + m.CPUInfo + ")"
	}
	return fmt.Sprintf("%s, %d cores", cpu, m.Cores)
}
