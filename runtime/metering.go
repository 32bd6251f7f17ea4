package runtime

import (
	"errors"

	"github.com/tetratelabs/wazero/api"

	"github.com/tally-billing/tally-openstack-collector/runtime/internal/metering"
)

// What a metered instance adds (Config.Metered): the budget global the
// metering pass exported, set before each guest call and read after it.

// findBudget looks up the budget of a metered instance; an unmetered one has
// none.
func (inst *instance) findBudget() error {
	if !inst.m.e.cfg.Metered {
		return nil
	}
	g, ok := inst.mod.ExportedGlobal(metering.Export).(api.MutableGlobal)
	if !ok {
		return errors.New("metered module without its budget")
	}
	inst.budget = g
	inst.setBudget(inst.m.e.initBudget())
	return nil
}

// setBudget gives the next guest call n instructions.
func (inst *instance) setBudget(n int64) {
	if inst.budget != nil {
		inst.budget.Set(uint64(n))
		inst.given = n
	}
}

// noteCharge records what the call that was given its budget by setBudget
// was charged.
func (inst *instance) noteCharge() {
	if inst.budget == nil {
		return
	}
	c := inst.given - int64(inst.budget.Get())
	for {
		most := inst.m.charged.Load()
		if c <= most || inst.m.charged.CompareAndSwap(most, c) {
			return
		}
	}
}

// budgetSpent reports whether the guest call that just trapped spent its
// budget: the pass's charge traps once the budget is below zero, and the
// guest's own traps leave it at or above zero.
func (inst *instance) budgetSpent() bool {
	return inst.budget != nil && int64(inst.budget.Get()) < 0
}
