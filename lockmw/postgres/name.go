package postgres

// Name names the store in the Locker's messages about it (store.Named).
func (s *pgStore) Name() string { return "PostgreSQL" }
