package mysql

// Name names the store in the Locker's messages about it (store.Named).
func (s *sqlStore) Name() string { return "MariaDB" }
