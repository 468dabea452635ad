package mysql

// ClaimKeepLeft reads how long a claim row is kept still, for the tests of
// the Scheduler's claims (sqlsuite.KeepLeft).
var ClaimKeepLeft = claimKeepLeft
