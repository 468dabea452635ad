module github.com/lockmw/lockmw/examples/inspect

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lockmw/lockmw v0.0.0
	github.com/lockmw/lockmw/examples v0.0.0
	github.com/lockmw/lockmw/lockmw/etcd v0.0.0
	github.com/lockmw/lockmw/lockmw/mysql v0.0.0
	github.com/lockmw/lockmw/lockmw/postgres v0.0.0
	github.com/lockmw/lockmw/lockmw/zookeeper v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	go.etcd.io/etcd/client/v3 v3.6.16
	go.uber.org/zap v1.28.0
)

replace (
	github.com/lockmw/lockmw => ../..
	github.com/lockmw/lockmw/examples => ..
	github.com/lockmw/lockmw/lockmw/etcd => ../../lockmw/etcd
	github.com/lockmw/lockmw/lockmw/mysql => ../../lockmw/mysql
	github.com/lockmw/lockmw/lockmw/postgres => ../../lockmw/postgres
	github.com/lockmw/lockmw/lockmw/zookeeper => ../../lockmw/zookeeper
)
