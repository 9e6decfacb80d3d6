package server

import (
	"log/slog"

	"github.com/dpd-dev/dpd/internal/ratelog"
)

// floodMessages are the warnings a controller (gRPC or pipe) can make dpd
// repeat at will, one per message it sends: they are rate-limited, while
// dpd_invalid_messages_total counts every instance. Other warnings pass
// untouched.
var floodMessages = []string{
	"rejected invalid controller message",                                          // server: failed validation
	"undecodable controller message; its endpoint goes to error and drops traffic", // gRPC and pipe: bytes that do not decode
	"invalid message ignored",                                                      // engine: counted invalid (empty, unknown payload)
}

// floodLimited wraps log so the flood warnings cost a bounded number of
// lines per interval.
func floodLimited(log *slog.Logger) *slog.Logger {
	return ratelog.Wrap(log, ratelog.Options{Messages: floodMessages})
}
