package zktest

import (
	"strings"
	"testing"
)

// Without java, or without the jar, the error says how to install
// ZooKeeper (the Debian package zookeeper, not zookeeperd).
func TestMissingZooKeeperSaysHowToInstall(t *testing.T) {
	t.Run("jar", func(t *testing.T) {
		t.Setenv("LOCKMW_ZOOKEEPER_JAR", t.TempDir()+"/missing.jar")
		_, err := findJar()
		if err == nil || !strings.Contains(err.Error(), "apt-get install zookeeper;") {
			t.Fatalf("findJar with a missing jar: %v, want the install advice", err)
		}
	})
	t.Run("java", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := findJar()
		if err == nil || !strings.Contains(err.Error(), "java not found") || !strings.Contains(err.Error(), "apt-get install zookeeper;") {
			t.Fatalf("findJar without java: %v, want the install advice", err)
		}
	})
}
