package findings

import "context"

// runChildren answers question 6. Not built yet.
func runChildren(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
