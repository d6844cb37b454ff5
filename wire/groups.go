package wire

// PausedTask is a paused task a group's resume left paused, with why it is paused.
type PausedTask struct {
	Name     string `json:"name"`
	PausedBy string `json:"paused_by"`
	Note     string `json:"note,omitempty"`
}

// GroupAnswer is the answer to POST /api/v1/groups/{group}/pause and .../resume. A pause's
// answer leaves out left_paused and left_paused_count, a resume's already_paused; a
// group done in part also carries "error".
type GroupAnswer struct {
	Group string `json:"group"`
	// Tasks counts the tasks paused (a pause) or resumed (a resume).
	Tasks int `json:"tasks"`
	// AlreadyPaused counts, for a pause, the tasks paused already by something else.
	AlreadyPaused int `json:"already_paused"`
	// LeftPaused names, for a resume, the group's paused tasks its pause did not pause (the
	// first of them per node); LeftPausedCount counts them all.
	LeftPaused      []PausedTask `json:"left_paused"`
	LeftPausedCount int          `json:"left_paused_count"`
}
