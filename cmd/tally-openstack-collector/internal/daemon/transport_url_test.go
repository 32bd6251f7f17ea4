package daemon

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/cmd/tally-openstack-collector/internal/settings"
	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/input/broker"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// TestTransportURLValidationAgreesWithTheBroker: a TRANSPORT_URL the settings
// accept is one the broker accepts, and the other way round; neither error
// quotes the password.
func TestTransportURLValidationAgreesWithTheBroker(t *testing.T) {
	ob, err := outbox.Open(outbox.Options{Dir: t.TempDir(), Logger: zerolog.Nop(), MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ob.Close() })
	p, err := pipeline.New(pipeline.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url, password string
	}{
		{"amqp://user:Zq/Wk@127.0.0.1/", "Zq/Wk"},
		{"amqp://user:Zq/Wk@127.0.0.1:5672/vhost", "Zq/Wk"},
		{"amqp://user:Zq#Wk@127.0.0.1:5672/", "Zq#Wk"},
		{"amqp://user:Zq?Wk@127.0.0.1:5672/", "Zq?Wk"},
		{"amqp://user:Zq@Wk:99@127.0.0.1:5672/", "Zq@Wk:99"},
		{"rabbit://user:Yv1Xj@h1:5672,user:Yv/Wk2@h2:5672/nova", "Yv/Wk2"},
		{"rabbit://user:Zq,Wk@h1:5672/", "Zq,Wk"},
		{"rabbit://user:12,34@h1:5672/", "12,34"},
		{"amqp://user:Zq-Wk@[::1]:5672/", "Zq-Wk"},
		{"amqp://user:Zq-Wk@::1:5672/", "Zq-Wk"},
		{"amqp://user:Zq-Wk@h:0/", "Zq-Wk"},
		{"amqp://user:Zq-Wk@h:x/", "Zq-Wk"},
		{"amqp://user:Zq-Wk@/", "Zq-Wk"},
		{"amqp://user:Zq-Wk@h/v#frag", "Zq-Wk"},
		{"amqp://user:Zq%zzWk@h/", "Zq%zzWk"},
		{"http://user:Zq-Wk@h/", "Zq-Wk"},
	} {
		env := []string{"TALLY_OSC_TRANSPORT_URL=" + c.url}
		cfg, cfgErr := settings.Load(nil, env, settings.ModeDump)
		var brokerErr error
		if cfgErr == nil {
			_, brokerErr = broker.New(p, ob, brokerOptions(cfg, zerolog.Nop(), nil))
		} else {
			_, brokerErr = broker.New(p, ob, broker.Options{TransportURL: c.url, Exchanges: []string{"nova"}, Logger: zerolog.Nop()})
		}
		if (cfgErr == nil) != (brokerErr == nil) {
			t.Errorf("%s: settings say %v, the broker says %v", c.url, cfgErr, brokerErr)
		}
		for _, err := range []error{cfgErr, brokerErr} {
			if err != nil && quotesPassword(err.Error(), c.password) {
				t.Errorf("%s: the error quotes the password: %v", c.url, err)
			}
		}
	}
}

// quotesPassword: msg holds the password or a piece of it (a run of letters
// and digits of two or more) between quotes or after a colon.
func quotesPassword(msg, password string) bool {
	if strings.Contains(msg, password) {
		return true
	}
	pieces := strings.FieldsFunc(password, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	for _, p := range pieces {
		if len(p) >= 2 && (strings.Contains(msg, `"`+p) || strings.Contains(msg, p+`"`) || strings.Contains(msg, ": "+p)) {
			return true
		}
	}
	return false
}
