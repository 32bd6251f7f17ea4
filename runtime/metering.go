package runtime

import (
	"errors"

	"github.com/tetratelabs/wazero/api"

	"github.com/tally-billing/tally-openstack-collector/runtime/internal/metering"
)

// What a metered instance adds (Config.Metered): the two globals the
// metering pass exported, the current slice of the call's budget and the
// reserve the guest draws the next slices from (BudgetSlice), set before
// each guest call and read after it.

// findBudget looks up the budget of a metered instance; an unmetered one has
// none.
func (inst *instance) findBudget() error {
	if !inst.m.e.cfg.Metered {
		return nil
	}
	g, ok := inst.mod.ExportedGlobal(metering.Export).(api.MutableGlobal)
	r, ok2 := inst.mod.ExportedGlobal(metering.ExportReserve).(api.MutableGlobal)
	if !ok || !ok2 {
		return errors.New("metered module without its budget")
	}
	inst.budget, inst.reserve = g, r
	inst.setBudget(inst.m.e.initBudget())
	return nil
}

// setBudget gives the next guest call n instructions: the first slice, and
// the rest in reserve.
func (inst *instance) setBudget(n int64) {
	if inst.budget != nil {
		slice, reserve := metering.Split(n, BudgetSlice)
		inst.budget.Set(uint64(slice))
		inst.reserve.Set(uint64(reserve))
		inst.given = n
	}
}

// left is what the current guest call has left of its budget; below zero
// once it trapped because it spent it.
func (inst *instance) left() int64 {
	return int64(inst.budget.Get()) + int64(inst.reserve.Get())
}

// noteCharge records what the call that was given its budget by setBudget
// was charged.
func (inst *instance) noteCharge() {
	if inst.budget == nil {
		return
	}
	c := inst.given - inst.left()
	for {
		most := inst.m.charged.Load()
		if c <= most || inst.m.charged.CompareAndSwap(most, c) {
			return
		}
	}
}

// budgetSpent reports whether the guest call that just trapped spent its
// budget: the pass traps once the budget and the reserve together are below
// zero, and the guest's own traps leave them at or above zero.
func (inst *instance) budgetSpent() bool {
	return inst.budget != nil && inst.left() < 0
}
