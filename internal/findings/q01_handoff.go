package findings

import "context"

// runHandoff answers question 1. Not built yet.
func runHandoff(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
