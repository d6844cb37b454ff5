package persist

// ConsecutiveIDs reports whether s takes the ids of a multi-row INSERT of definitions for
// consecutive (mysqlConsecutiveIDs).
func ConsecutiveIDs(s Store) bool { return s.(*sqlStore).consecutiveIDs }
