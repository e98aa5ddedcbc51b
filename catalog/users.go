package catalog

import (
	"log/slog"
	"sync"

	"kvd/tenant"
)

// plainWarned holds the names of the users already warned about a
// plain-text password: reloads and retried edits do not repeat it.
var plainWarned sync.Map

// BuildUsers makes the users specs state (the config file's, or the
// cluster's users document), warning in log about each plain-text
// password. An invalid spec fails the whole list.
func BuildUsers(specs []UserSpec, log *slog.Logger) ([]*tenant.User, error) {
	list := make([]*tenant.User, 0, len(specs))
	for _, u := range specs {
		user, err := tenant.NewUser(u.Name, u.Password, u.PasswordHash, u.Buckets, u.Privileges)
		if err != nil {
			return nil, err
		}
		if user.UsesPlainPassword() {
			if _, warned := plainWarned.LoadOrStore(u.Name, true); !warned {
				log.Warn("user has a plain-text password; use password_hash in production", "user", u.Name)
			}
		}
		list = append(list, user)
	}
	return list, nil
}
