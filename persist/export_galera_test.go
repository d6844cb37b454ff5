package persist

// ConsecutiveIDs reports whether s takes the ids of a multi-row INSERT of definitions for
// consecutive (mysqlConsecutiveIDs).
func ConsecutiveIDs(s Store) bool { return s.(*sqlStore).consecutiveIDs }

// SetGalera makes s fence as on a Galera node (galera.go), or not, whatever its server: the
// Galera fence measured and tested on one server. Set it before Fenced.
func SetGalera(s Store, on bool) { s.(*sqlStore).galera = on }

// Galera reports whether s found its server to be a Galera node.
func Galera(s Store) bool { return s.(*sqlStore).galera }
