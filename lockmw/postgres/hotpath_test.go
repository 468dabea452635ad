package postgres_test

import (
	"testing"

	"github.com/lockmw/lockmw/lockmw"
)

// TestUncontendedAcquisitionWritesNoQueueRow: a waiting acquisition
// (Acquire, default or Fair) of a free lock takes it without a queue row,
// written or deleted: the uncontended path is one acquisition batch and a
// release, as a plain attempt's.
func TestUncontendedAcquisitionWritesNoQueueRow(t *testing.T) {
	srv := startServer(t)
	srv.Exec(t, `CREATE TABLE queue_writes (op text NOT NULL);
CREATE FUNCTION count_queue_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO queue_writes VALUES (TG_OP); RETURN NULL; END $$;
CREATE TRIGGER count_queue_writes AFTER INSERT OR UPDATE OR DELETE ON lockmw_locks_queue
	FOR EACH ROW EXECUTE FUNCTION count_queue_writes()`)
	l := newLocker(t, srv.URL())
	ctx := bg(t)
	for i := range 4 {
		var opts []lockmw.AcquireOption
		if i%2 == 1 {
			opts = []lockmw.AcquireOption{lockmw.Fair()}
		}
		lease, err := l.Acquire(ctx, "free", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if w := srv.Exec(t, "SELECT count(*) FROM queue_writes"); w != "0" {
		t.Fatalf("4 uncontended acquisitions wrote %s queue rows (%s), want none", w, srv.Exec(t, "SELECT string_agg(op, ',') FROM queue_writes"))
	}
}
