package admin_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/engine"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// TestConsoleScreenshots writes a screenshot of every page of the console at desktop
// (1280×800) and phone (390×844) width: into $AXE_DOCS_IMG when set (the README's set is
// written with AXE_DOCS_IMG=../docs/img), else under the artifacts folder. The data is a
// small live scheduler: tasks in six groups, one cron task failing, an executor, a rate
// limit, an alert delivered to a webhook. Each page is checked to have rendered its
// content before its picture is taken.
func TestConsoleScreenshots(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	dir := os.Getenv("AXE_DOCS_IMG")
	if dir == "" {
		dir = filepath.Join(artifacts(t), "pages")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	h := daemontest.NewHook(t)
	file := filepath.Join(t.TempDir(), "axe.db")
	mod := func(c *axedaemon.Config) {
		c.Engine = engine.Config{AlertWebhooks: []string{h.URL("/ok/alert")}, HeartbeatInterval: 300 * time.Millisecond}
	}
	// A day of another node's minutes, as the day chart reads them after a restart: a
	// daily curve of fires with a burst of failures and late fires in the afternoon.
	if err := daemontest.Start(t, "sqlite:"+file, mod).Stop(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli() / 60000 * 60000
	for m := now - 24*3600_000; m < now; m += 60000 {
		x := float64(m%86_400_000) / 86_400_000 * 2 * math.Pi
		fires := int64(300 + 200*math.Sin(x))
		failures, late := fires/100, int64(4)
		if h := (now - m) / 3600_000; h >= 5 && h < 7 {
			failures, late = fires/4, 180
		}
		if _, err := db.Exec(`INSERT INTO minute_stats (minute, node, fires, failures, late_sum_ms, late_count) VALUES (?, 'node-b', ?, ?, ?, ?)`,
			m, fires, failures, late*fires, fires); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
	d := daemontest.Start(t, "sqlite:"+file, mod)
	url := d.Base + "/"
	for i := range 18 {
		zone := []string{"UTC", "Europe/Paris", "America/New_York"}[i%3]
		d.Create(t, daemontest.Spec(fmt.Sprintf("report-%02d", i), h.URL("/ok/r"), "cron", "0 */15 * * * *", "group", fmt.Sprintf("team-%d", i%6), "timezone", zone))
	}
	d.Create(t, daemontest.Spec("flaky-sync", h.URL("/fail/sync"), "cron", "*/2 * * * * *", "group", "team-3", "timezone", "Asia/Tokyo"))
	d.Create(t, daemontest.Spec("nightly-dst", h.URL("/ok/n"), "cron", "30 2 * * *", "group", "team-1", "timezone", "Europe/Berlin"))
	startSDK(t, d.Base, "127.0.0.1:0")
	d.Create(t, map[string]any{"name": "charge-cards", "trigger": "manual", "group": "billing",
		"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})
	d.WaitRun(t, "charge-cards", d.RunNow(t, "charge-cards", nil))
	// A run now given params, which its page shows.
	withParams := d.RunNow(t, "charge-cards", map[string]any{"params": map[string]any{"batch": "2026-12-06", "currency": "EUR", "dry_run": true}})
	d.WaitRun(t, "charge-cards", withParams)
	d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/ratelimits", map[string]any{"downstream": "billing", "rate": 20, "burst": 5}, nil)
	h.WaitCalls(t, "flaky-sync", 3, daemontest.WaitTimeout)
	var runs struct{ Runs []model.Run }
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/flaky-sync/runs?limit=1", nil, &runs)

	pages := []struct{ name, hash, ready string }{
		{"overview", "#/overview", `document.querySelector("#ov-failing .value").textContent !== "" && Number(document.querySelector("#overview-day").dataset.fires) > 0`},
		{"tasks", "#/tasks", `document.querySelectorAll("#task-table tbody tr").length > 10`},
		{"tasks-failing", "#/tasks?failed_within=1h&sort=failed", `document.querySelectorAll("#task-table tbody tr").length === 1`},
		{"task", "#/tasks/nightly-dst", `document.querySelectorAll("#fires-table tbody tr").length === 10`},
		{"task-failing", "#/tasks/flaky-sync", `document.querySelectorAll("#runs-table tbody tr").length > 1`},
		{"form", "#/new", `!!document.querySelector("#cron-preview #fires-table")`},
		{"runs", "#/runs?result=failure", `document.querySelectorAll("#all-runs-table tbody tr").length > 1`},
		{"run", "#/run/" + runs.Runs[0].Ticket, `document.querySelector("#run-error").textContent.length > 5`},
		{"run-params", "#/run/" + withParams, `document.querySelector("#run-params-given").textContent.includes("EUR")`},
		{"executors", "#/executors", `!!document.querySelector('#executors-table tr[data-status="alive"]')`},
		{"groups", "#/groups", `document.querySelectorAll("#groups-table tbody tr").length >= 7`},
		{"alerts", "#/alerts", `!!document.querySelector('#deliveries-table tr[data-delivery="delivered"]')`},
		{"ratelimits", "#/ratelimits", `!!document.querySelector('#ratelimits-table tr[data-downstream="billing"]')`},
		{"nodes", "#/nodes", `!!document.querySelector("#nodes-table")`},
	}
	for _, size := range []struct {
		name string
		w, h int64
		opts []chromedp.EmulateViewportOption
	}{{"desktop", 1280, 800, nil}, {"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile}}} {
		run(t, ctx, "viewport "+size.name, chromedp.EmulateViewport(size.w, size.h, size.opts...))
		for _, p := range pages {
			run(t, ctx, "open "+p.name, chromedp.Navigate(url+"?shot="+p.name+"#"+p.hash[1:]))
			waitJS(t, ctx, p.name+" rendered", "(() => { try { return "+p.ready+"; } catch { return false; } })()")
			if p.name == "task" {
				// The preview from a day before the spring change in Berlin: 02:30 does not
				// exist on 2027-03-28, and the row says so.
				run(t, ctx, "preview from March 2027", setField("#preview-from", "2027-03-26T00:00:00"))
				waitJS(t, ctx, "the DST gap marked", `!!document.querySelector("#fires-table tr.dst-gap")`)
			}
			if size.name == "phone" {
				// On a phone no page is wider than the screen.
				if over := mustEval(t, ctx, phoneOverflow); over != "" {
					t.Errorf("%s at %d px: %s", p.name, size.w, over)
				}
			}
			// The refresh is stopped so that nothing changes under the picture.
			run(t, ctx, "settle", chromedp.Evaluate(`localStorage.setItem("axe.refreshPaused", "1")`, nil), chromedp.Sleep(300*time.Millisecond))
			var raw []byte
			run(t, ctx, "screenshot "+p.name, chromedp.CaptureScreenshot(&raw))
			name := filepath.Join(dir, "console-"+p.name+"-"+size.name+".png")
			small, err := docsPNG(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, small, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes (%d before the palette)", name, len(small), len(raw))
			run(t, ctx, "resume", chromedp.Evaluate(`localStorage.removeItem("axe.refreshPaused")`, nil))
		}
	}
	// The phone's menu, opened over the overview.
	run(t, ctx, "open the overview", chromedp.Navigate(url+"?shot=menu#/overview"))
	waitJS(t, ctx, "overview rendered", `!!document.querySelector("#ov-failing .value")`)
	clickUntil(t, ctx, "open the menu", "#nav-toggle", `document.querySelector("#nav-toggle").getAttribute("aria-expanded") === "true"`)
	run(t, ctx, "settle", chromedp.Sleep(300*time.Millisecond))
	var raw []byte
	run(t, ctx, "screenshot the menu", chromedp.CaptureScreenshot(&raw))
	small, err := docsPNG(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-menu-phone.png"), small, 0o644); err != nil {
		t.Fatal(err)
	}
}

// docsPNG is what a screenshot is written as: shrunk (shrinkPNG) for the pictures committed
// under $AXE_DOCS_IMG, as Chromium took it for a test run's artifacts. Shrinking asserts
// nothing and costs seconds of CPU a picture under -race (a palette search for each of its
// million pixels), which the suite's run of these tests spent on two shared cores.
func docsPNG(raw []byte) ([]byte, error) {
	if os.Getenv("AXE_DOCS_IMG") == "" {
		return raw, nil
	}
	return shrinkPNG(raw)
}

// shrinkPNG re-encodes a screenshot with a palette of its 256 most frequent colours (a
// console page has few: flat panels and text; the anti-aliased rest maps to the nearest),
// which keeps the committed pictures small.
func shrinkPNG(raw []byte) ([]byte, error) {
	src, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("cannot decode the screenshot: %w", err)
	}
	freq := map[color.RGBA]int{}
	b := src.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := src.At(x, y).RGBA()
			freq[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 255}]++
		}
	}
	cols := make([]color.RGBA, 0, len(freq))
	for c := range freq {
		cols = append(cols, c)
	}
	sort.Slice(cols, func(i, j int) bool {
		if freq[cols[i]] != freq[cols[j]] {
			return freq[cols[i]] > freq[cols[j]]
		}
		a, c := cols[i], cols[j]
		return uint32(a.R)<<16|uint32(a.G)<<8|uint32(a.B) < uint32(c.R)<<16|uint32(c.G)<<8|uint32(c.B)
	})
	pal := make(color.Palette, 0, 256)
	for _, c := range cols[:min(256, len(cols))] {
		pal = append(pal, c)
	}
	dst := image.NewPaletted(b, pal)
	draw.Draw(dst, b, src, b.Min, draw.Src)
	var out bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&out, dst); err != nil {
		return nil, fmt.Errorf("cannot encode the screenshot: %w", err)
	}
	return out.Bytes(), nil
}
