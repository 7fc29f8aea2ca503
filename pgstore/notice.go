package pgstore

import "fmt"

// Role is what a Service is doing for its store.
type Role uint8

// Roles of a Service.
const (
	Standby Role = iota // waits for the leader's lease to lapse
	Leader              // runs the scheduler, commits in its term
	Stopped             // after Shutdown
)

// String returns the role's name: standby, leader, stopped.
func (r Role) String() string {
	switch r {
	case Standby:
		return "standby"
	case Leader:
		return "leader"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// Notice tells a WithNotify function of a Service's change of role, or of
// a failure to lead.
type Notice struct {
	Role Role  // the role it has now
	Term int64 // the term it leads (Leader), or last led
	Err  error // why it left its role or failed to lead, if it did not choose to
}
