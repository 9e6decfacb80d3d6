package engine

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

const defaultReportingInterval = 30 * time.Second

// configManager holds the last ConfigUpdate. The kernel is (re)configured
// before the first apply and whenever the config changes.
type configManager struct {
	cfg        map[string]string
	dirty      bool // the kernel has not seen cfg yet
	configured bool // Configure succeeded at least once
	retry      retryState
	lastErr    string

	// Parsed values the engine itself uses.
	reportInterval  time.Duration
	interfacePrefix []string
	// interfaceExclude: ConfigUpdate's InterfaceExclude, else
	// defaultExclude (Options.InterfaceExclude).
	interfaceExclude ifaceMatcher
	defaultExclude   ifaceMatcher
	excludeErr       string // the last InterfaceExclude that did not parse
}

func (c *configManager) init() {
	c.cfg = map[string]string{}
	c.dirty = true
	c.reportInterval = defaultReportingInterval
}

func (c *configManager) copy() map[string]string { return maps.Clone(c.cfg) }

// update stores cfg and reports whether it changed.
func (c *configManager) update(cfg map[string]string) bool {
	if maps.Equal(c.cfg, cfg) {
		return false
	}
	c.cfg = maps.Clone(cfg)
	if c.cfg == nil {
		c.cfg = map[string]string{}
	}
	c.dirty = true
	c.retry.reset()
	c.reportInterval = parseSeconds(c.cfg["ReportingIntervalSecs"], defaultReportingInterval)
	c.interfacePrefix = nil
	for _, p := range strings.Split(c.cfg["InterfacePrefix"], ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.interfacePrefix = append(c.interfacePrefix, p)
		}
	}
	c.interfaceExclude, c.excludeErr = c.defaultExclude, ""
	if v, ok := c.cfg["InterfaceExclude"]; ok {
		if m, err := parseIfaceMatcher(v); err != nil {
			c.excludeErr = err.Error()
		} else {
			c.interfaceExclude = m
		}
	}
	return true
}

// parseSeconds reads a positive number of seconds (fractions allowed);
// anything else gives def.
func parseSeconds(s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f <= 0 || f > 24*3600 {
		return def
	}
	return time.Duration(f * float64(time.Second))
}

func (e *Engine) onConfigUpdate(u *model.ConfigUpdate) {
	old := e.cfg.reportInterval
	if e.cfg.update(u.Config) {
		if e.cfg.reportInterval != old {
			e.rescheduleHeartbeat()
		}
		e.heps.refChanged()
		if e.cfg.excludeErr != "" {
			e.log.Warn("InterfaceExclude ignored; keeping the default", "err", e.cfg.excludeErr)
		}
		e.log.Info("config updated", "keys", len(e.cfg.cfg),
			"reporting_interval", e.cfg.reportInterval, "interface_prefix", e.cfg.interfacePrefix)
	}
}
