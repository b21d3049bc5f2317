package reconcile

import (
	"testing"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
