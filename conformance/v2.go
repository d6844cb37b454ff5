package conformance

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// Version 2 of the executor protocol (docs/protocol.md): the parts package protocol does not
// define yet. Each is replaced by protocol's own definition once it has one.

// pathDeregister is where an executor stopping gracefully deregisters.
const pathDeregister = "/api/v1/executors/deregister"

// headerIncarnation names the incarnation a signed call is meant for.
const headerIncarnation = "X-Axe-Incarnation"

// register is a registration body of either version: protocol.Register plus the fields
// version 2 adds.
type register struct {
	App         string   `json:"app"`
	Address     string   `json:"address"`
	Protocol    string   `json:"protocol"`
	Handlers    []string `json:"handlers"`
	Auth        string   `json:"auth,omitempty"`
	Version     int      `json:"version,omitempty"`
	Incarnation string   `json:"incarnation,omitempty"`
}

// registerAnswer is protocol.RegisterAnswer with the scheduler's protocol version.
type registerAnswer struct {
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms"`
	LostAfterMS         int64 `json:"lost_after_ms"`
	Version             int   `json:"version"`
}

// heartbeat is protocol.Heartbeat with the incarnation version 2 adds.
type heartbeat struct {
	App         string `json:"app"`
	Address     string `json:"address"`
	Running     int    `json:"running"`
	Incarnation string `json:"incarnation,omitempty"`
}

// deregister is the body of pathDeregister.
type deregister struct {
	App         string `json:"app"`
	Address     string `json:"address"`
	Incarnation string `json:"incarnation,omitempty"`
}

// signCall signs a call to an executor: version 1 (protocol.SignCall) when incarnation is
// empty, else version 2, bound to that incarnation.
func signCall(key []byte, at time.Time, address, path, epoch, incarnation string, body []byte) string {
	if incarnation == "" {
		return protocol.SignCall(key, at, address, path, epoch, body)
	}
	ms := at.UnixMilli()
	m := hmac.New(sha256.New, key)
	m.Write([]byte("axe-dispatch-v2\n" + strconv.FormatInt(ms, 10) + "\n" + address + "\n" + path + "\n" +
		epoch + "\n" + incarnation + "\n"))
	m.Write(body)
	return protocol.SignatureScheme + " t=" + strconv.FormatInt(ms, 10) + ",sig=" + hex.EncodeToString(m.Sum(nil))
}
