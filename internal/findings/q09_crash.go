package findings

import "context"

// runCrash answers question 9. Not built yet.
func runCrash(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
