package findings

import "context"

// runDisk answers question 4. Not built yet.
func runDisk(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
