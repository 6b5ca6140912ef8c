package findings

import "context"

// runScale answers question 11. Not built yet.
func runScale(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
