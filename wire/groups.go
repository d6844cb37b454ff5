package wire

// PausedTask is a paused task a group's resume left paused, with why it is paused.
type PausedTask struct {
	Name     string `json:"name"`
	PausedBy string `json:"paused_by"`
	Note     string `json:"note,omitempty"`
}
