package fire

import (
	"os"
	"strconv"
)

// DefaultInstance is the name an instance is logged under when none is
// given: host name and process id.
func DefaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
