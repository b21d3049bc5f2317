package config

// Not available yet.
//
// This file is the one place that rejects what the config language
// accepts but this build cannot run. When a feature lands, delete its
// entry here and its case in TestNotYet; nothing else needs to change.

// plannedKeys are keys of planned features, with what to tell the user.
var plannedKeys = map[string]string{}

// notYet rejects values of planned features.
func (v *validator) notYet() {
	_ = v.c
}
