package persist

import "context"

// ListPlan says which way ListTasks reads f's page on s: "runtime" (the runtime table
// scanned first) or "join" (the order's index walked).
func ListPlan(ctx context.Context, s Store, f TaskFilter) (string, error) {
	from, err := s.(*sqlStore).listFrom(ctx, f)
	if from == taskJoin {
		return "join", err
	}
	return "runtime", err
}
