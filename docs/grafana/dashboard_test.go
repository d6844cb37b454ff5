// Package grafana_test checks docs/grafana/axe.json against Grafana's own dashboard schema,
// as the Grafana Foundation SDK generates it into Go types (dashboard and every core panel
// kind), since no Grafana runs here to import it.
package grafana_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// strict decodes raw with the SDK's strict decoder (unknown fields, wrong types and missing
// required fields are errors, in the panels' options too) and validates the result.
func strict(raw []byte) error {
	var d dashboard.Dashboard
	err := d.UnmarshalJSONStrict(raw)
	// The decoder returns an empty error list, not nil, when it found nothing.
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		err = nil
	}
	if err != nil {
		return err
	}
	return d.Validate()
}

func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	plugins.RegisterDefaultPlugins() // the panel kinds, so that each panel's options are checked
	raw, err := os.ReadFile("axe.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := strict(raw); err != nil {
		t.Fatalf("docs/grafana/axe.json does not match Grafana's dashboard schema:\n%v", err)
	}
	// The check can fail: an unknown field, and a panel option of the wrong type.
	for what, bad := range map[string][]byte{
		"an unknown top-level field":  bytes.Replace(raw, []byte(`"title": "axe",`), []byte(`"title": "axe", "titel": "axe",`), 1),
		"a stat option of wrong type": bytes.Replace(raw, []byte(`"graphMode": "area"`), []byte(`"graphMode": 7`), 1),
	} {
		if bytes.Equal(bad, raw) {
			t.Fatalf("%s: the replacement did not apply", what)
		}
		if strict(bad) == nil {
			t.Errorf("the schema check accepts a dashboard with %s", what)
		}
	}
}
