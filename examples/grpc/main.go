// Command grpc serves the flash-sale "buy" endpoint over gRPC: a limited
// stock of one item, sold by three server instances that share one Redis.
// Each Buy reads the stock, takes a moment to "charge the card", and writes
// the stock back: a read-check-write that oversells when two buyers
// interleave. grpclock holds the item's lock around every Buy, so the shop
// sells exactly its stock; with -nolock it does not, and oversells. Each Buy
// waits up to a second for the lock (grpclock.WithWait); past that a buyer
// gets Aborted and retries after the RetryInfo delay. The service needs no
// generated code: it is a hand-written grpc.ServiceDesc with a JSON codec.
// Each instance's Redis client uses the settings a lock needs (see lockmw's
// package documentation, section "Redis: client settings"). -h lists the
// flags.
//
// With REDIS_ADDR set it uses that Redis; otherwise it starts an embedded
// in-process Redis, so it runs on a machine with no Redis installed:
//
//	go run ./examples/grpc
//	go run ./examples/grpc -nolock
//	REDIS_ADDR=localhost:6379 go run ./examples/grpc -buyers 200 -stock 50
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/lockmw/lockmw/examples/internal/demo"
	"github.com/lockmw/lockmw/grpclock"
	"github.com/lockmw/lockmw/lockmw"
)

// The service speaks JSON, so the example needs no generated code:
//
//	service Shop { rpc Buy(BuyRequest) returns (BuyReply); }
const buyMethod = "/flashsale.Shop/Buy"

// BuyRequest orders one unit of Item for Buyer.
type BuyRequest struct {
	Item  string `json:"item"`
	Buyer string `json:"buyer"`
}

// GetItem is the getter protoc would generate; grpclock.Getter uses it.
func (r *BuyRequest) GetItem() string { return r.Item }

// BuyReply confirms a purchase.
type BuyReply struct {
	Left int `json:"left"` // stock left after this purchase
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

func init() { encoding.RegisterCodec(jsonCodec{}) }

func main() {
	var (
		buyers    = flag.Int("buyers", 100, "concurrent buyers")
		stock     = flag.Int("stock", 30, "units of the item on sale")
		instances = flag.Int("instances", 3, "server instances sharing one Redis")
		nolock    = flag.Bool("nolock", false, "serve without grpclock (oversells)")
	)
	flag.Parse()
	if *buyers < 1 || *stock < 0 || *instances < 1 {
		fmt.Fprintln(os.Stderr, "need -buyers >= 1, -stock >= 0 and -instances >= 1")
		flag.Usage()
		os.Exit(2)
	}
	addr, stop := demo.RedisAddr()
	defer stop()

	ctx := context.Background()
	const item = "tshirt-42"
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Del(ctx, stockKey(item), ordersKey(item)).Err(); err != nil {
		log.Fatal(err)
	}
	if err := admin.Set(ctx, stockKey(item), *stock, 0).Err(); err != nil {
		log.Fatal(err)
	}

	// Lost-lock warnings go to stderr; the story goes to stdout.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var targets []string
	for i := range *instances {
		target, shutdown := startInstance(fmt.Sprintf("shop-%d", i+1), addr, logger, !*nolock)
		defer shutdown()
		targets = append(targets, target)
	}
	mode := "each Buy holds lock item:{id} (grpclock)"
	if *nolock {
		mode = "no lock"
	}
	fmt.Printf("%d buyers, %d instances, %d in stock, %s\n", *buyers, *instances, *stock, mode)

	var bought, soldOut, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range *buyers {
		target := targets[i%len(targets)]
		wg.Go(func() {
			switch err := buy(ctx, target, item, "buyer-"+strconv.Itoa(i)); status.Code(err) {
			case codes.OK:
				bought.Add(1)
			case codes.FailedPrecondition:
				soldOut.Add(1)
			default:
				failed.Add(1)
				log.Printf("buyer-%d: %v", i, err)
			}
		})
	}
	wg.Wait()

	orders, err := admin.LLen(ctx, ordersKey(item)).Result()
	if err != nil {
		log.Fatal(err)
	}
	left, err := admin.Get(ctx, stockKey(item)).Int()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("buyers told \"bought\": %d, \"sold out\": %d, errors: %d\n", bought.Load(), soldOut.Load(), failed.Load())
	fmt.Printf("sold %d of %d available (stock counter now %d)\n", orders, *stock, left)
	switch {
	case orders > int64(*stock):
		fmt.Printf("OVERSOLD by %d: buyers interleaved between reading and writing the stock\n", orders-int64(*stock))
	case orders == int64(*stock) && left == 0:
		fmt.Println("never oversold: every unit sold exactly once")
	default:
		fmt.Println("not oversold")
	}
}

// buy places one order with a deadline; a busy item (Aborted) is retried
// after the delay the server's RetryInfo suggests.
func buy(ctx context.Context, target, item, buyer string) error {
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("json")))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		err := conn.Invoke(ctx, buyMethod, &BuyRequest{Item: item, Buyer: buyer}, new(BuyReply))
		st, _ := status.FromError(err)
		if st.Code() != codes.Aborted {
			return err
		}
		delay := 10 * time.Millisecond
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = min(ri.GetRetryDelay().AsDuration(), 50*time.Millisecond)
			}
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return err
		}
	}
}

// shop is one server instance's Buy: a read-check-write on the shared
// stock, the kind of code that needs a lock around it.
type shop struct{ rdb *redis.Client }

// Buy sells one unit, or answers FailedPrecondition when the item is sold out.
func (s *shop) Buy(ctx context.Context, req *BuyRequest) (*BuyReply, error) {
	left, err := s.rdb.Get(ctx, stockKey(req.Item)).Int()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read stock: %v", err)
	}
	if left <= 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is sold out", req.Item)
	}
	time.Sleep(2 * time.Millisecond) // charge the card
	if err := ctx.Err(); err != nil {
		return nil, err // the lock was lost or the buyer left: do not write
	}
	if err := s.rdb.Set(ctx, stockKey(req.Item), left-1, 0).Err(); err != nil {
		return nil, status.Errorf(codes.Internal, "write stock: %v", err)
	}
	if err := s.rdb.RPush(ctx, ordersKey(req.Item), req.Buyer).Err(); err != nil {
		return nil, status.Errorf(codes.Internal, "record order: %v", err)
	}
	return &BuyReply{Left: left - 1}, nil
}

var shopDesc = grpc.ServiceDesc{
	ServiceName: "flashsale.Shop",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Buy",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(BuyRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) { return srv.(*shop).Buy(ctx, req.(*BuyRequest)) }
			if icpt == nil {
				return handler(ctx, req)
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: buyMethod}, handler)
		},
	}},
}

// startInstance serves the shop on a loopback port with its own Redis
// client and Locker, as a separate process would, and returns its address.
func startInstance(name, addr string, logger *slog.Logger, locked bool) (string, func()) {
	rdb := demo.RedisClient(addr) // the client settings a lock needs
	locker, err := lockmw.New(rdb, lockmw.WithTTL(2*time.Second), lockmw.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	var opts []grpc.ServerOption
	if locked {
		opts = append(opts, grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker,
			grpclock.Getter((*BuyRequest).GetItem),
			grpclock.WithMethods(map[string]string{buyMethod: "item:{id}"}),
			grpclock.WithWait(time.Second), // queue briefly; past that, Aborted with RetryInfo
			grpclock.WithLogger(logger),
		)))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&shopDesc, &shop{rdb: rdb})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Printf("%s: %v", name, err)
		}
	}()
	return lis.Addr().String(), func() {
		srv.GracefulStop()
		_ = locker.Close()
		_ = rdb.Close()
	}
}

func stockKey(item string) string  { return "shop:stock:" + item }
func ordersKey(item string) string { return "shop:orders:" + item }
