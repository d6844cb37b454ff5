package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/axe-sched/axe/executor/agent"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadAppliesDefaults(t *testing.T) {
	path := writeConfig(t, `{"app":"ops","schedulers":["http://127.0.0.1:7070"],
		"handlers":{"backup":{"command":["/bin/sh","-c","tar czf /tmp/x.tgz /etc"],"env":{"K":"V"}}}}`)
	cfg, err := agent.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := agent.Config{
		App:             "ops",
		Listen:          agent.ListenDefault,
		Schedulers:      []string{"http://127.0.0.1:7070"},
		OutputTailBytes: agent.OutputTailBytesDefault,
		KillGraceMS:     agent.KillGraceDefault.Milliseconds(),
		Handlers: map[string]agent.Command{
			"backup": {Command: []string{"/bin/sh", "-c", "tar czf /tmp/x.tgz /etc"}, Env: map[string]string{"K": "V"}},
		},
	}
	if cfg.Logger == nil {
		t.Error("Logger not defaulted")
	}
	cfg.Logger = nil
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("Load = %+v\nwant   %+v", cfg, want)
	}
}

func TestLoadRejectsInvalidConfigNamingTheField(t *testing.T) {
	const handlers = `"handlers":{"h":{"command":["true"]}}`
	const scheds = `"schedulers":["http://127.0.0.1:7070"]`
	for _, tc := range []struct {
		name, body, field string
	}{
		{"missing app", `{` + scheds + `,` + handlers + `}`, "app: required"},
		{"app with space", `{"app":"o p",` + scheds + `,` + handlers + `}`, "app:"},
		{"no schedulers", `{"app":"ops",` + handlers + `}`, "schedulers:"},
		{"bad scheduler", `{"app":"ops","schedulers":["127.0.0.1:7070"],` + handlers + `}`, "schedulers[0]:"},
		{"scheduler with path", `{"app":"ops","schedulers":["http://a:1","http://b:1/api"],` + handlers + `}`, "schedulers[1]:"},
		{"no handlers", `{"app":"ops",` + scheds + `}`, "handlers:"},
		{"empty command", `{"app":"ops",` + scheds + `,"handlers":{"backup":{"command":[]}}}`, "handlers.backup.command:"},
		{"blank program", `{"app":"ops",` + scheds + `,"handlers":{"backup":{"command":[""]}}}`, "handlers.backup.command:"},
		{"relative dir", `{"app":"ops",` + scheds + `,"handlers":{"backup":{"command":["true"],"dir":"tmp"}}}`, "handlers.backup.dir:"},
		{"reserved env", `{"app":"ops",` + scheds + `,"handlers":{"backup":{"command":["true"],"env":{"AXE_PARAMS":"x"}}}}`, "handlers.backup.env:"},
		{"bad env name", `{"app":"ops",` + scheds + `,"handlers":{"backup":{"command":["true"],"env":{"A=B":"x"}}}}`, "handlers.backup.env:"},
		{"empty handler name", `{"app":"ops",` + scheds + `,"handlers":{"":{"command":["true"]}}}`, "handlers:"},
		{"negative tail", `{"app":"ops",` + scheds + `,"output_tail_bytes":-1,` + handlers + `}`, "output_tail_bytes:"},
		{"huge tail", `{"app":"ops",` + scheds + `,"output_tail_bytes":999999999,` + handlers + `}`, "output_tail_bytes:"},
		{"negative grace", `{"app":"ops",` + scheds + `,"kill_grace_ms":-5,` + handlers + `}`, "kill_grace_ms:"},
		{"own scheduler token", `{"app":"ops","token":"t","scheduler_token":"s",` + scheds + `,` + handlers + `}`, "scheduler_token:"},
		{"bad listen", `{"app":"ops","listen":"9100",` + scheds + `,` + handlers + `}`, "listen:"},
		{"bad advertise", `{"app":"ops","advertise":"host",` + scheds + `,` + handlers + `}`, "advertise:"},
		{"unknown field", `{"app":"ops","hanlders":{},` + scheds + `,` + handlers + `}`, `unknown field "hanlders"`},
		{"wrong type", `{"app":"ops","output_tail_bytes":"4k",` + scheds + `,` + handlers + `}`, "output_tail_bytes"},
		{"trailing data", `{"app":"ops",` + scheds + `,` + handlers + `} {}`, "trailing data"},
		{"not json", `app = ops`, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agent.Load(writeConfig(t, tc.body))
			if !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Load = %v, want ErrInvalidConfig mentioning %q", err, tc.field)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := agent.Load(filepath.Join(t.TempDir(), "absent.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load = %v, want a not-exist error", err)
	}
}

func TestNewValidatesToo(t *testing.T) {
	_, err := agent.New(agent.Config{App: "ops", Schedulers: []string{"http://127.0.0.1:7070"}})
	if !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), "handlers:") {
		t.Errorf("New without handlers = %v", err)
	}
}
