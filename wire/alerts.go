package wire

// Alert is the JSON a webhook receives.
type Alert struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Task    string `json:"task,omitempty"`
	Group   string `json:"group,omitempty"`
	Node    string `json:"node"`
	At      int64  `json:"at"`
}

// AlertDelivery is one recent alert and what became of it.
type AlertDelivery struct {
	Alert
	State    string `json:"delivery"`
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"` // the last failure's, for a failed delivery
}
