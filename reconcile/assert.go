package reconcile

var _ Source = (*Postgres)(nil)
