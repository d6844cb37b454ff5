package admin_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"
)

// TestConsoleBrowserShards: the Nodes page's Shards section, first on a single node (which
// schedules every shard), then once two nodes hold shard leases on its database: each node's
// ranges and epochs in the table, the unowned shards named, and every one of the 256 cells of
// the map showing its holder.
func TestConsoleBrowserShards(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, nil)
	url := d.Base + "/"
	run(t, ctx, "open nodes", chromedp.Navigate(url+"#/nodes"), chromedp.WaitVisible("#shards-view", chromedp.ByQuery))
	waitJS(t, ctx, "a single node schedules every shard", `document.querySelector("#shards-view").dataset.mode === "single" &&
		document.querySelector("#shards-mode").textContent.includes("One node schedules every shard") && !document.querySelector("#shard-map")`)

	st, err := persist.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"n1", "n2"} {
		if _, err := st.ClaimNode(t.Context(), persist.Node{ID: id, Advertise: "http://" + id, Role: "owner", Instance: id}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	take := func(holder string, lo, hi int) {
		var shards []int
		for n := lo; n <= hi; n++ {
			shards = append(shards, n)
		}
		if _, err := st.TakeShards(t.Context(), holder, shards, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	take("n1", 0, 127)
	take("n2", 128, 239)
	waitJS(t, ctx, "the sharded cluster drawn on a refresh", `document.querySelector("#shards-view").dataset.mode === "sharded"`)
	waitJS(t, ctx, "each node's shards and epochs", `(() => {
		const row = id => [...document.querySelectorAll('#shards-table tr[data-node="' + id + '"] td')].map(td => td.textContent).join("|");
		return row("n1") === "n1|owner|0-127|128|1" && row("n2") === "n2|owner|128-239|112|1";
	})()`)
	waitJS(t, ctx, "the unowned shards named", `document.querySelector("#shards-unowned").textContent.includes("240-255")`)
	waitJS(t, ctx, "the map shows every shard's holder", `(() => {
		const cells = [...document.querySelectorAll("#shard-map .shard-cell")];
		return cells.length === 256 &&
			cells.every(c => c.dataset.holder === (Number(c.dataset.shard) < 128 ? "n1" : Number(c.dataset.shard) < 240 ? "n2" : "")) &&
			cells.filter(c => c.classList.contains("shard-none")).length === 16;
	})()`)
	shot(t, ctx, artifacts(t), "console-shards")
}
