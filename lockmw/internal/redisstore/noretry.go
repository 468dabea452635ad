package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// This file keeps go-redis from sending lockmw's writes twice.
//
// go-redis (v9) retries a command, or a whole pipeline, that may already
// have reached Redis and run there:
//
//   - baseClient.processWithRetry (redis.go) runs _process up to
//     MaxRetries+1 times (default 3 retries) while shouldRetry (error.go)
//     approves the error: a read timeout of a plain command (_process sets
//     retryTimeout when the command has no read timeout of its own, which
//     EVAL/EVALSHA/SET never have), io.EOF and other connection errors
//     after the write; also TRYAGAIN, LOADING, CLUSTERDOWN, MASTERDOWN,
//     READONLY replies, which mean it did not run.
//   - baseClient.generalProcessPipelineFrom resends the whole pipeline when
//     its read fails with such an error (shouldRetry(err, true): timeouts
//     always count for pipelines), up to MaxRetries times.
//   - ClusterClient.process runs its own loop of MaxRedirects+1 attempts
//     (default 3 redirects) around the node client's: a timeout is retried
//     on the same node, then on another; and ClusterClient.pipelineReadCmds
//     resends a node's whole batch when the batch's read fails, or when its
//     first command answered a retryable error (TRYAGAIN), though the
//     others ran.
//
// A replayed lockmw write is not harmless: a release that ran answers
// "gone" the second time (ErrLost for a release that succeeded); a
// transfer that ran finds the waiter's token and answers "taken" (the
// waiter is never told, the lock stays held for a TTL); an acquisition that
// ran finds its own token ("busy": the caller gives up while the key is
// held by a token nobody owns); a fair "wait" queues its entry twice. So
// lockmw makes sure that none of them is run twice by the client, rather
// than making each replay-safe (an acquisition recognising its own token
// could not tell a replay from a token reused on purpose, and a replayed
// transfer or grant has already published and moved the fence): every
// lockmw write goes to go-redis wrapped in noRetry, whose NoRetry() makes
// each of the loops above stop at the first error (processWithRetry,
// ClusterClient.process and the pipeline paths all check NoRetry, the
// pipelines through cmdsContainNoRetry). MOVED, ASK and READONLY are
// still followed by ClusterClient.process (it handles them before the
// NoRetry check: they mean the command did not run), a cluster pipeline
// whose connection could not be had is still remapped and sent, and a
// connection found out of step before the command was written is still
// replaced (go-redis' "forced" retry). What is given up is the client's
// retry of the other errors: a timeout or a broken connection (lockmw
// cannot tell whether its write ran), a failed dial, a pool timeout and
// LOADING, CLUSTERDOWN, MASTERDOWN replies; they reach the caller as
// ErrUnavailable at once, as they did once the retries were used up, and
// TRYAGAIN is retried by lockmw itself (whileSlotMoves). A second client
// with MaxRetries -1 would give up the same and more: a ClusterClient
// retries timeouts in its MaxRedirects loop too, which cannot be turned
// off without turning off redirects, and it would be a second pool of
// connections to close. The user's client and its options stay as they
// are, and renewals keep go-redis' retries: renew.lua is idempotent (a
// replayed PEXPIRE only keeps the key longer than the deadline lockmw
// computed from the first send).

// noRetry is a command that go-redis must never send again after an
// attempt that may have reached Redis.
type noRetry struct{ redis.Cmder }

func (noRetry) NoRetry() bool { return true }

// processor is what once sends commands through: a client or a pipeline.
type processor interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// once is a redis.Scripter whose EVAL and EVALSHA go through c as noRetry
// commands: a Script run on it is sent by the client at most once.
type once struct{ c processor }

func (o once) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval", script, keys, args)
}

func (o once) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha", sha1, keys, args)
}

func (o once) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval_ro", script, keys, args)
}

func (o once) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha_ro", sha1, keys, args)
}

func (o once) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return o.c.ScriptExists(ctx, hashes...)
}

func (o once) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return o.c.ScriptLoad(ctx, script)
}

func (o once) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, payload, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = o.c.Process(ctx, noRetry{cmd}) // the error is cmd's
	return cmd
}

// sendOnce queues or runs cmd on c as a noRetry command and returns it.
func sendOnce[C redis.Cmder](ctx context.Context, c processor, cmd C) C {
	_ = c.Process(ctx, noRetry{cmd}) // the error is cmd's
	return cmd
}
