"""The metric libraries whose update sites noop knows below the presets (the float
argument of a spec's probe on one of their methods): their import paths. Light: no
binary is read here."""

CLIENT_GOLANG = "github.com/prometheus/client_golang/prometheus"
