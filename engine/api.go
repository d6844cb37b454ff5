package engine

// API is the engine as the HTTP API (admin/), the console, the daemon and the client-side
// tools see it: the task, run, group, limit and view operations of the api_*.go files. It
// shares the engine (it embeds it), so an operation reaches the core as the core's own code
// does; what it adds is the boundary: the core's methods are on *Engine, what callers outside
// the engine ask for is on *API (Engine.API).
type API struct{ *Engine }

// API returns the operations the HTTP API and the other callers outside the engine use.
func (e *Engine) API() *API { return e.api }
